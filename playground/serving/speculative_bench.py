"""`python -m playground bench speculative`: prompt-lookup speculative decoding against plain
decoding on the engine itself, at batch 1, 4 and 16 (`run_speculative_bench`).

Two workloads, as prompt lookup's users know them: `fresh` prompts (a slice of the lecture; the
answer seldom repeats what the prompt says) and `quoting` prompts (a passage of the lecture, then
its first words again: the model trained on the lecture goes on with the passage, which the prompt
holds, as a summary, an answer citing its context or an edit of code does). Per workload and batch
size B: B greedy requests are added at once and the engine steps until all are done, plain and
speculative alternately for `rounds` rounds on the same requests; the tokens must be identical (the
run fails otherwise). Reported: the median time of each, the speed-up, the acceptance rate (accepted
/ drafted tokens), the engine steps each took. Where it stops paying: a verification step runs
1 + k positions per sequence; at batch 1 the step is bound by its fixed costs (reading the weights,
and here Python's per-step work) and the extra positions are nearly free, while at a large batch
the step computes, and every rejected draft is work taken from other sequences (vLLM's docs warn
the same for high load).
"""

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from playground.core.errors import ParamError
from playground.core.rundir import EXIT_FAILED, EXIT_OK, make_run_dir
from playground.display.report import Report, Table, make_console, render_report
from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.kv_pool import KVLayout, KVPool
from playground.kvcache.engine.llm_engine import LLMEngine
from playground.kvcache.engine.policies import make_policy
from playground.kvcache.engine.sequence import SamplingParams
from playground.kvcache.engine.tensor_parallel import SeqIds
from playground.serving.served import LATEST, RANDOM, latest_trained, model_file
from playground.transformer.blas import pin_blas_threads
from playground.transformer.checkpoint import load_model
from playground.transformer.config import ModelConfig
from playground.transformer.data import lecture_bytes
from playground.transformer.model import Transformer

PROMPT_TOKENS = 16  # a fresh prompt's
QUOTED_TOKENS = 40  # a quoting prompt's passage; then its first PROMPT_TOKENS again
WORKLOADS = ("fresh", "quoting")


@dataclass(frozen=True)
class SpeculativeBenchConfig:
    model: str = LATEST  # latest | random | a model.npz | a run directory
    runs_dir: str = "runs"
    batch_sizes: tuple[int, ...] = (1, 4, 16)
    workloads: tuple[str, ...] = WORKLOADS
    num_speculative_tokens: int = 4
    output_tokens: int = 48
    rounds: int = 3
    seed: int = 0
    out: str = "runs"

    def __post_init__(self):
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ParamError("--batch-sizes", f"must be integers >= 1, got {self.batch_sizes}")
        if self.num_speculative_tokens < 1:
            raise ParamError("--speculative-tokens", f"must be >= 1, got {self.num_speculative_tokens}")
        if not self.workloads or set(self.workloads) - set(WORKLOADS):
            raise ParamError(
                "--workloads", f"a list of {', '.join(WORKLOADS)}, got {','.join(self.workloads)}"
            )
        if self.output_tokens < 2 or self.rounds < 1:
            raise ParamError("--output-tokens", "needs >= 2 output tokens and >= 1 round")


def load(config: SpeculativeBenchConfig) -> tuple[Transformer, str]:
    spec = config.model
    if spec == LATEST:
        found = latest_trained(Path(config.runs_dir))
        spec = str(found) if found else RANDOM
    if spec == RANDOM:
        return Transformer(
            ModelConfig(context=256), seed=config.seed
        ), "random weights (2 layers, d_model 64)"
    path = model_file(spec)
    c, params = load_model(path)
    return Transformer(c, params), str(path)


def decode(
    model: Transformer, prompts: list[list[int]], max_new: int, config: EngineConfig
) -> tuple[float, list, LLMEngine]:
    """All prompts at once, greedy, to the end: (seconds, each one's tokens, the engine)."""
    c = model.config
    policy = make_policy("paged", 64 * 1024, 16)
    layout = KVLayout(c.layers, c.heads, c.head_dim)
    engine = LLMEngine(
        model, policy, KVPool(policy.capacity_slots, layout.width, layout), config, new_seq_ids=SeqIds()
    )
    for i, p in enumerate(prompts):
        engine.add_request(b"", i, p, SamplingParams(max_new))
    tokens: dict[int, list[int]] = {}
    t0 = time.perf_counter()
    while engine.has_work():
        for r in engine.step()[0]:
            tokens[r.reply_id] = r.seqs[0].token_ids[len(r.prompt) :]
    return time.perf_counter() - t0, [tokens[i] for i in range(len(prompts))], engine


def workload_prompts(workload: str, batch: int, context: int, seed: int) -> list[list[int]]:
    """`batch` prompts of `workload` (module doc), drawn from the lecture; a quoting prompt's passage
    is cut to leave room in the model's context for its answer."""
    text = lecture_bytes()
    rng = np.random.default_rng([seed, batch, WORKLOADS.index(workload)])
    if workload == "fresh":
        starts = rng.integers(0, len(text) - PROMPT_TOKENS, batch)
        return [text[s : s + PROMPT_TOKENS].tolist() for s in starts]
    quoted = min(QUOTED_TOKENS, context // 2)
    starts = rng.integers(0, len(text) - quoted, batch)
    return [[*text[s : s + quoted].tolist(), *text[s : s + PROMPT_TOKENS].tolist()] for s in starts]


def measure(model: Transformer, config: SpeculativeBenchConfig, batch: int, workload: str = "fresh") -> dict:
    prompts = workload_prompts(workload, batch, model.config.context, config.seed)
    max_new = min(config.output_tokens, model.config.context - len(prompts[0]))
    plain_config = EngineConfig(max_num_seqs=max(batch, 1))
    spec_config = replace(plain_config, num_speculative_tokens=config.num_speculative_tokens)
    times: dict[str, list[float]] = {"plain": [], "spec": []}
    same = True
    for _ in range(config.rounds):  # alternated, so that a busy moment hits both
        t_plain, plain, plain_engine = decode(model, prompts, max_new, plain_config)
        t_spec, spec, engine = decode(model, prompts, max_new, spec_config)
        times["plain"].append(t_plain)
        times["spec"].append(t_spec)
        same = same and plain == spec
    plain_s, spec_s = float(np.median(times["plain"])), float(np.median(times["spec"]))
    tokens = batch * max_new
    return {
        "workload": workload,
        "batch": batch,
        "plain_tok_s": tokens / plain_s,
        "spec_tok_s": tokens / spec_s,
        "speedup": plain_s / spec_s,
        "acceptance": engine.num_accepted_tokens / max(1, engine.num_draft_tokens),
        "steps": f"{engine.num_steps} vs {plain_engine.num_steps}",
        "identical": same,
    }


COLUMNS = {
    "workload": "prompts",
    "batch": "batch",
    "plain_tok_s": "plain tok/s",
    "spec_tok_s": "spec tok/s",
    "speedup": "speed-up",
    "acceptance": "accepted",
    "steps": "steps",
    "identical": "same",
}


def run_speculative_bench(config: SpeculativeBenchConfig) -> int:
    console = make_console()
    pin_blas_threads(1)  # as the server does: one engine thread, BLAS on it
    model, what = load(config)
    rows = []
    for workload in config.workloads:
        for batch in config.batch_sizes:
            console.print(
                f"{workload} prompts, batch {batch}: plain and speculative, {config.rounds} rounds ...",
                highlight=False,
            )
            rows.append(measure(model, config, batch, workload))
    notes = [
        f"model: {what}; {config.num_speculative_tokens} drafts a step by prompt lookup, greedy, up to "
        f"{config.output_tokens} tokens a request (as the context allows), median of {config.rounds} "
        "alternated rounds",
        "prompts: fresh, a slice of the lecture (the answer seldom repeats it); quoting, a passage and "
        "then its first words again (the answer goes on with the passage the prompt holds)",
    ]
    for workload in config.workloads:
        pays = [r["batch"] for r in rows if r["workload"] == workload and r["speedup"] > 1]
        notes.append(
            f"{workload} prompts: speculative decoding pays at batch "
            + (", ".join(map(str, pays)) if pays else "none of these")
            + "; where it does not, the verification's extra positions cost more than the steps they save"
        )
    failures = [
        f"{r['workload']} prompts, batch {r['batch']}: speculative tokens differ from plain decoding"
        for r in rows
        if not r["identical"]
    ]
    report = Report(
        not failures,
        [Table("Speculative decoding (prompt lookup) against plain decoding", rows, COLUMNS)],
        notes,
        failures,
    )
    render_report(report, console)
    run_dir = make_run_dir(Path(config.out), "bench-speculative")
    import json
    from dataclasses import asdict

    body = {
        "ok": report.ok,
        "tables": [asdict(t) for t in report.tables],
        "notes": notes,
        "failures": failures,
    }
    (run_dir / "result.json").write_text(json.dumps(body, indent=1))
    console.print(f"written: {run_dir}/result.json", highlight=False)
    return EXIT_OK if report.ok else EXIT_FAILED
