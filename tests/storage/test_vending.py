"""A table's session policy, evaluated by moto's own IAM policy evaluator, and the
locations and settings vending refuses."""

from __future__ import annotations

import json

import pytest
from moto.iam.access_control import IAMPolicy, PermissionResult

from metastore.errors import BadRequest
from metastore.storage.sts import session_name
from metastore.storage.vending import Scope, VendingSettings, session_policy

ROLE = "arn:aws:iam::123456789012:role/vending"
ALLOWED = PermissionResult.PERMITTED


def verdict(policy: str, action: str, key: str) -> PermissionResult:
    return IAMPolicy(policy).is_action_permitted(action, f"arn:aws:s3:::lake/{key}")


def test_the_policy_reaches_the_tables_objects_only() -> None:
    policy = session_policy(Scope.of("s3://lake/wh/db/t", write=True))
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        assert verdict(policy, action, "wh/db/t/data/a.parquet") == ALLOWED
        for elsewhere in ("wh/db/t2/data/a.parquet", "wh/db/t", "wh/db/other/t/x", "x"):
            assert verdict(policy, action, elsewhere) != ALLOWED, (action, elsewhere)
    listing = json.loads(policy)["Statement"][1]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["wh/db/t/", "wh/db/t/*"]}}


def test_a_reader_gets_no_write_action() -> None:
    policy = session_policy(Scope.of("s3://lake/wh/db/t", write=False))
    assert verdict(policy, "s3:GetObject", "wh/db/t/data/a.parquet") == ALLOWED
    for action in ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
        assert verdict(policy, action, "wh/db/t/data/a.parquet") != ALLOWED


@pytest.mark.parametrize(
    "location",
    [
        "s3://lake/wh/db/t*",  # a wildcard would name t2, t3, ...
        "s3://lake/wh/db/t?",
        "s3://lake/wh/${aws:username}",  # a policy variable
        "file:///wh/db/t",
        "s3://lake",  # the whole bucket
        "s3://lake/" + "a" * 2000,  # longer than a session policy may be
    ],
)
def test_locations_a_policy_cannot_name_exactly_are_refused(location: str) -> None:
    with pytest.raises(BadRequest):
        session_policy(Scope.of(location, write=True))


def test_settings_and_session_names() -> None:
    settings = VendingSettings.from_json({"role-arn": ROLE}, None)
    assert (settings.duration_s, settings.sts_endpoint, settings.partition) == (3600, None, "aws")
    same_origin = {"role-arn": ROLE, "sts-endpoint": "http://minio:9000"}
    assert VendingSettings.from_json(same_origin, "http://MINIO:9000/").sts_endpoint
    with pytest.raises(BadRequest):
        VendingSettings.from_json(same_origin, "http://minio:9001")
    aws = {"role-arn": ROLE, "sts-endpoint": "https://sts.eu-west-1.amazonaws.com"}
    assert VendingSettings.from_json(aws, None).sts_endpoint == aws["sts-endpoint"]
    assert session_name("etl@acme") == "metastore-etl@acme"
    assert session_name("x/y z" * 30).startswith("metastore-x-y-z")
    assert len(session_name("x" * 100)) == 64
