"""A client whose server restarts loses nothing: the standalone server (`python -m
playground.kvcache.server`) SIGKILLed with generate requests in flight and started again on the same
address and journal; the client re-sends what it had in flight under the same ids, each id is
answered once, with the tokens of dense generation (greedy and seeded sampling); an id the old
server finished is answered from the journal, not generated again; with `resends=0` the client
reports the loss (ServerLost) instead."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from playground.kvcache.server.client import KVClient, ServerLost
from playground.transformer import ModelConfig, Transformer, generate

ROOT = Path(__file__).resolve().parent.parent
SHAPE = ["--layers", "2", "--heads", "2", "--d-model", "32", "--context", "512"]
MODEL = Transformer(ModelConfig(layers=2, d_model=32, heads=2, context=512), seed=0)
LONG = 300  # tokens of each long request: still running when the first, short one is answered
SAMPLING = [{"temperature": 0.0}, {"temperature": 0.9, "seed": 5}, {"temperature": 0.7, "seed": 11, "n": 2}]


def start(endpoint: str, journal: Path, name: str, tmp_path: Path) -> subprocess.Popen:
    """A model server on `endpoint`, once it says it is bound."""
    cmd = [sys.executable, "-m", "playground.kvcache.server", "--bind", endpoint, "--random-model",
           *SHAPE, "--capacity-tokens", "8000", "--journal", str(journal)]  # fmt: skip
    err = open(tmp_path / f"{name}.err", "w")  # noqa: SIM115 - closed with the test's tmp_path
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    if "serving" not in proc.stdout.readline():
        proc.kill()
        raise AssertionError((tmp_path / f"{name}.err").read_text())
    return proc


@contextlib.contextmanager
def servers(tmp_path):
    """(endpoint, journal, the started processes): every one killed at the end."""
    procs: list[subprocess.Popen] = []
    try:
        yield f"ipc://{tmp_path}/kv.sock", tmp_path / "answers.jsonl", procs
    finally:
        for p in procs:
            p.kill()
            p.wait(5)


def dense(prompt: str, max_new: int, temperature: float = 0.0, seed: int = 0, n: int = 1) -> list:
    return [generate(MODEL, list(prompt.encode()), max_new, temperature=temperature, seed=seed + i).tolist()
            for i in range(n)]  # fmt: skip


@pytest.mark.timeout(90)
def test_a_restarted_server_answers_each_in_flight_request_id_exactly_once(tmp_path):
    with servers(tmp_path) as (endpoint, journal, procs):
        procs.append(start(endpoint, journal, "server-1", tmp_path))
        client = KVClient(endpoint, timeout_s=30.0)
        try:
            client.ping()
            short = client.submit("a short one", 3)
            asked = {rid: (f"question {k}", s) for k, s in enumerate(SAMPLING)
                     for rid in [client.submit(f"question {k}", LONG, **s)]}  # fmt: skip
            killed = []

            def kill_and_restart(header: dict) -> None:
                if not killed:  # the short one is answered: kill the server with the long ones running
                    assert header["id"] == short
                    procs[0].send_signal(signal.SIGKILL)
                    procs[0].wait(5)
                    killed.append(header["server"])
                    procs.append(start(endpoint, journal, "server-2", tmp_path))

            replies = client.collect([short, *asked], kill_and_restart)
            assert sorted(replies) == sorted([short, *asked])  # each id answered, once
            assert {h["server"] for rid, h in replies.items() if rid != short} != set(killed)
            for rid, (prompt, s) in asked.items():
                assert replies[rid]["ok"] and replies[rid]["tokens"] == dense(prompt, LONG, **s), rid
            assert client.num_resent == len(asked) and client.resent == {}
            stats, _ = client.check("stats")
            assert stats["answers"]["answered"] == len(asked) + 1  # the journal's, and the re-sent
            assert stats["engine"]["finished_requests"] == len(asked)  # the short one not again
        finally:
            client.close()
        again = KVClient(endpoint, timeout_s=30.0, identity=client.identity)  # the same client, restarted
        try:
            again.ping()
            reply = again.generate("a short one", 3)  # its id 2 again: answered from the journal
            assert reply["replayed"] and reply["tokens"] == replies[short]["tokens"] == dense(
                "a short one", 3
            )
        finally:
            again.close()
        procs[-1].send_signal(signal.SIGINT)
        assert procs[-1].wait(10) == 0


@pytest.mark.timeout(60)
def test_without_resends_a_restart_is_reported_naming_the_lost_requests(tmp_path):
    with servers(tmp_path) as (endpoint, journal, procs):
        procs.append(start(endpoint, journal, "server-1", tmp_path))
        client = KVClient(endpoint, timeout_s=30.0, resends=0)
        try:
            client.ping()
            ids = [client.submit("a short one", 2), client.submit("a long one", LONG)]

            def kill_and_restart(header: dict) -> None:
                procs[0].send_signal(signal.SIGKILL)
                procs[0].wait(5)
                procs.append(start(endpoint, journal, "server-2", tmp_path))

            with pytest.raises(ServerLost, match=r"generate requests 3 .* the server restarted") as lost:
                client.collect(ids, kill_and_restart)
            assert lost.value.request_ids == [ids[1]] and lost.value.restarted
        finally:
            client.close()
