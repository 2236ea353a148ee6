"""Loopback ports for child processes: each pytest-xdist worker draws from its own block
below the kernel's ephemeral range, so two workers never start nodes on one port, and a
process never hands the same port out twice."""

from __future__ import annotations

import socket

import pytest

from harness import process


def test_each_worker_has_its_own_block_and_no_port_is_handed_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process, "_handed", set())
    blocks = {}
    for worker in ("gw0", "gw1", "gw7"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        ports = [process.free_port() for _ in range(50)]
        assert len(set(ports)) == 50
        block = process._block()
        assert all(port in block for port in ports)
        assert block.stop <= 32768  # below the kernel's default ephemeral range
        blocks[worker] = block
    assert len({b.start for b in blocks.values()}) == 3
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert process._block().start == process.FIRST_PORT


def test_a_bound_port_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "_handed", set())
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    held = []
    try:
        for port in process._block()[:100]:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
        taken = {sock.getsockname()[1] for sock in held}
        assert all(process.free_port() not in taken for _ in range(200))
    finally:
        for sock in held:
            sock.close()
