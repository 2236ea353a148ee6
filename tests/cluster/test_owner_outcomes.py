"""How a partition owner reads a failed transaction (workers/owner.py): fenced or unknown.

librdkafka says "a newer producer with our transactional id exists" with its own
error codes; the owner turns exactly those into ``Fenced`` (stop for good, queued
writes go to the newer owner) and keeps every other failure as it is ("commit
state unknown": new producer, new barrier). Real confluent-kafka errors, no
broker: the fencing between two owners on a broker is in test_owner.py.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError, KafkaException

from metastore.cluster import protocol
from metastore.errors import CommitStateUnknown, Fenced, NotOwner
from workers.owner import Outcome, fencing_as_error


@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED])
def test_kafka_fencing_becomes_fenced(code: int) -> None:
    cause = KafkaException(KafkaError(code, "fenced by a newer transactional producer"))
    with pytest.raises(Fenced) as fenced, fencing_as_error(4):
        raise cause
    assert fenced.value.partition == 4
    assert fenced.value.__cause__ is cause
    assert Outcome.of_failure(fenced.value) is Outcome.FENCED


@pytest.mark.parametrize(
    "error",
    [
        KafkaException(KafkaError(KafkaError._TIMED_OUT)),
        KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down")),
        KafkaException("not a KafkaError"),
        TimeoutError("view did not apply refs[4]@12"),
    ],
)
def test_any_other_failure_is_kept_and_of_unknown_outcome(error: Exception) -> None:
    with pytest.raises(type(error)) as raised, fencing_as_error(4):
        raise error
    assert raised.value is error
    assert Outcome.of_failure(error) is Outcome.UNKNOWN
    assert Outcome.of_failure(CommitStateUnknown("lost")) is Outcome.UNKNOWN


def test_nothing_raised_is_nothing_changed() -> None:
    with fencing_as_error(4):
        pass


def test_a_fenced_owner_answers_as_not_owner() -> None:
    """Should ``Fenced`` ever reach HTTP, it is the routine, retried 503, never a 500."""
    fenced = Fenced("partition 4: a newer barrier follows ours", 4)
    assert isinstance(fenced, NotOwner)
    body = fenced.to_body()
    assert body == {
        "error": {
            "message": "partition 4: a newer barrier follows ours",
            "type": "NotOwnerException",
            "code": 503,
        }
    }
    assert protocol.is_not_owner_answer(fenced.status, json.dumps(body).encode())
