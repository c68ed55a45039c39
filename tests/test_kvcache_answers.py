"""The finished-id table (kvcache/server/answers.py) in one process, ModelServer.handle + step, no
sockets: a generate id re-sent while it runs is not started twice, one re-sent after it finished
gets the same reply, not a second generation; an id used for another request is refused; a new
server on the old one's journal answers what the old one finished (a torn last line skipped); a
client forgotten by its lease is a new client; the table keeps the newest answers of each client."""

import json

import pytest

from playground.core.errors import UsageError
from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.server import protocol as P
from playground.kvcache.server.answers import AnswerTable
from playground.kvcache.server.generate import ModelServer
from playground.transformer import ModelConfig, Transformer, generate

MODEL = Transformer(ModelConfig(layers=2, d_model=32, heads=4, context=48), seed=1)


class Clock:
    def __init__(self):
        self.now_s = 0.0

    def __call__(self):
        return self.now_s


def server(journal=None, **kw) -> ModelServer:
    return ModelServer(
        "paged", 400, 4, MODEL, max_new_tokens=64, engine_config=EngineConfig(), journal=journal, **kw
    )


def send(srv, client: bytes, req_id, prompt="hello", max_new=12, **fields) -> dict | None:
    frames = srv.handle(
        client, P.encode_request("generate", id=req_id, prompt=prompt, max_new_tokens=max_new, **fields)
    )
    return None if frames is None else P.decode_reply(frames)[0]


def drain(srv) -> list[tuple[bytes, dict]]:
    """Step the engine until it holds nothing; every (client, reply) it sent."""
    out = []
    while srv.has_work():
        out += [(c, P.decode_reply(f)[0]) for c, f in srv.step()]
    return out


def test_a_resend_while_running_is_not_started_twice_and_one_after_gets_the_same_reply():
    srv = server()
    assert send(srv, b"A", 1, seed=3, temperature=0.8) is None
    srv.step()
    assert send(srv, b"A", 1, seed=3, temperature=0.8) is None  # still running: nothing new
    assert srv.engine.stats()["requests"] == 1
    ((client, first),) = drain(srv)
    assert client == b"A" and first["ok"] and "replayed" not in first
    want = generate(MODEL, list(b"hello"), 12, temperature=0.8, seed=3).tolist()
    assert first["tokens"] == [want]
    generated = srv.engine.num_generated_tokens
    again = send(srv, b"A", 1, seed=3, temperature=0.8)  # finished: the same reply, at once
    assert again["replayed"] is True and again["tokens"] == first["tokens"] and again["id"] == 1
    assert srv.engine.num_generated_tokens == generated and not srv.has_work()
    assert send(srv, b"B", 1, seed=3, temperature=0.8) is None  # another client's id 1: its own request
    assert [c for c, _ in drain(srv)] == [b"B"]
    answers = srv.stats()["answers"]
    assert answers == {"running": 0, "answered": 2, "replayed": 1, "attached": 1, "loaded": 0}


def test_an_id_used_again_for_another_request_is_refused_naming_it():
    srv = server()
    assert send(srv, b"A", "q-7", prompt="one") is None
    refused = send(srv, b"A", "q-7", prompt="two")
    assert refused["ok"] is False and refused["error"] == P.BAD_REQUEST and refused["id"] == "q-7"
    assert "already used" in refused["message"]
    drain(srv)
    assert send(srv, b"A", "q-7", prompt="one", max_new=5)["error"] == P.BAD_REQUEST  # other sampling


def test_requests_without_an_id_are_not_deduplicated():
    srv = server()
    for _ in range(2):
        srv.handle(b"A", P.encode_request("generate", prompt="x", max_new_tokens=3))
    assert len(drain(srv)) == 2


def test_a_new_server_on_the_journal_answers_what_the_old_one_finished(tmp_path):
    journal = tmp_path / "answers.jsonl"
    old = server(journal)
    send(old, b"A", 1, prompt="first")
    send(old, b"A", 2, prompt="second", max_new=40)
    [(_, first)] = [r for r in drain_until(old, 1)]
    old.close()  # killed with request 2 running: its reply never sent
    with open(journal, "a") as f:
        f.write('{"client": "41", "id": "3", "fingerpr')  # a torn last line
    new = server(journal)
    assert new.stats()["answers"]["loaded"] == 1 and new.instance_id != old.instance_id
    again = send(new, b"A", 1, prompt="first")
    assert again["replayed"] and again["tokens"] == first["tokens"]
    assert new.engine.num_generated_tokens == 0
    assert send(new, b"A", 2, prompt="second", max_new=40) is None  # lost with the old server: runs again
    [(_, second)] = drain(new)
    assert second["tokens"] == [generate(MODEL, list(b"second"), 40).tolist()]
    new.close()
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert sorted(e["id"] for e in lines) == ["1", "2"]  # rewritten at start: the torn line is gone


def drain_until(srv, k: int) -> list:
    out = []
    while len(out) < k:
        out += [(c, P.decode_reply(f)[0]) for c, f in srv.step()]
    return out


def test_a_client_forgotten_by_its_lease_is_a_new_client():
    clock = Clock()
    srv = server(clock=clock)
    srv.lease_s = 1.0
    send(srv, b"A", 1)
    drain(srv)
    clock.now_s = 5.0
    srv.expire_leases()
    assert send(srv, b"A", 1) is None  # forgotten: it runs again
    assert len(drain(srv)) == 1


def test_the_table_keeps_the_newest_answers_of_each_client():
    table = AnswerTable(per_client=2)
    for k in range(3):
        key = (b"A", str(k))
        table.start(key, {"op": "generate", "prompt": k})
        table.finish(key, {"ok": True, "k": k})
    assert table.num_answers == 2 and table.answers[b"A"].keys() == {"1", "2"}


def test_a_journal_where_none_can_be_kept_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="cannot keep the answers journal .*missing"):
        AnswerTable(tmp_path / "missing" / "answers.jsonl")
