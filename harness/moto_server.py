"""moto's standalone server, with the session policies of assumed roles enforced.

moto (5.x) evaluates, when IAM enforcement is on, the policies of the IAM user or
role behind a request's key, but it keeps the ``Policy`` given to AssumeRole (the
session policy) without ever evaluating it: a credential scoped to one table
would reach every object its role reaches. A session policy only narrows a role
(the request must be allowed by both), so this adds that second check, using
moto's own policy evaluator, and teaches that evaluator ``StringLike`` (it
evaluates only ``StringEquals`` and ignores every other condition operator) with
the ``s3:prefix`` key of a ListBucket request (absent: the empty prefix). Nothing
else of moto changes; run as ``python -m harness.moto_server -p PORT``.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from moto.iam import access_control, policy_conditions
from moto.server import main
from moto.sts.models import sts_backends


def _string_like(expected_value: list[str] | str, actual_value: str) -> bool:
    patterns = [expected_value] if isinstance(expected_value, str) else expected_value
    return any(fnmatch.fnmatchcase(actual_value, pattern) for pattern in patterns)


def _session_policy(key: access_control.AssumedRoleAccessKey) -> str | None:
    for role in sts_backends[key.account_id][key.partition].assumed_roles:
        if role.access_key_id == key._access_key_id:
            policy: str | None = role.policy
            return policy
    return None


def _condition_values(request: access_control.IAMRequestBase) -> dict[str, str]:
    if request._action != "s3:ListBucket":
        return {}
    data: Any = request._data
    prefix = data.get("prefix", "") if hasattr(data, "get") else ""
    if isinstance(prefix, list):
        prefix = prefix[0] if prefix else ""
    return {"s3:prefix": str(prefix)}


_role_check = access_control.IAMRequestBase.check_action_permitted


def _check_action_permitted(self: access_control.IAMRequestBase, resource: str) -> None:
    _role_check(self, resource)
    key = self._access_key
    if not isinstance(key, access_control.AssumedRoleAccessKey):
        return
    policy = _session_policy(key)
    if not policy:
        return
    verdict = access_control.IAMPolicy(policy).is_action_permitted(
        self._action, resource, None, _condition_values(self)
    )
    if verdict != access_control.PermissionResult.PERMITTED:
        self._raise_access_denied()


policy_conditions.CONDITION_OPERATIONS["StringLike"] = _string_like
access_control.IAMRequestBase.check_action_permitted = _check_action_permitted  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
