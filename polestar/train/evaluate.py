"""python -m polestar.train.evaluate: accuracy of a model on held-out task examples with the reference sampler.

Examples are batched by exact prompt length (the reference sampler takes unpadded rows, and LLaDA attends
to padding, so padding would change the answers). Prints one JSON line per task and times a full forward.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections import defaultdict

if __name__ == "__main__":  # run as a program: OpenMP workers that sleep (polestar/threads.py)
    from polestar.threads import quiet_openmp

    quiet_openmp()

import torch  # noqa: E402

from polestar import tasks
from polestar.api import chat_prompt_ids
from polestar.reference import generate
from polestar.tasks.arith import CARRY_IN, CARRY_OUT, COLUMN, DIGIT


def evaluate(model, task: str, n: int, seed: int, gen_length: int, block_length: int,
             threshold: float | None, batch: int, skip: int = 0) -> dict:
    """Accuracy of `n` held-out examples, the ones after the first `skip` (a run in parts decodes each example as
    a whole run does: rows are decoded independently); "rows" holds each example's prompt, target, completion and
    verdict."""
    examples = tasks.make(task, skip + n, seed)[skip:]
    tok = model.tokenizer
    by_len: dict[int, list[tuple[int, list[int]]]] = defaultdict(list)
    for i, ex in enumerate(examples):
        ids = chat_prompt_ids(tok, ex.prompt)
        by_len[len(ids)].append((i, ids))
    steps, content_tokens, completions = 0, 0, [""] * n
    t0 = time.perf_counter()
    for group in by_len.values():
        for k in range(0, len(group), batch):
            chunk = group[k : k + batch]
            prompt = torch.tensor([ids for _, ids in chunk], device=model.device)
            out = generate(model, prompt, gen_length, block_length, threshold=threshold)
            steps += sum(out.steps_per_row)
            gen = out.canvas[:, prompt.shape[1]:].cpu()
            content_tokens += int((gen != model.eos_id).sum())
            for (i, _), row in zip(chunk, gen):
                completions[i] = tok.decode(row, skip_special_tokens=True)
    wall = time.perf_counter() - t0
    rows = [{"prompt": ex.prompt, "target": ex.target, "completion": text, "correct": bool(tasks.score(task, ex, text))}
            for ex, text in zip(examples, completions)]
    correct = sum(r["correct"] for r in rows)
    return {"task": task, "n": n, "skip": skip, "seed": seed, "threshold": threshold, "gen_length": gen_length,
            "block_length": block_length, "accuracy": correct / n, "tokens_per_step": n * gen_length / steps,
            "tpf": content_tokens / steps, "wall_s": round(wall, 1), "rows": rows}


@torch.no_grad()
def fill_accuracy(model, task: str, n: int, seed: int, ratio: float, gen_length: int = 64) -> dict:
    """Teacher-forced probe (one forward per example, no sampler): mask `ratio` of the reference answer's tokens
    (at least one) on a canvas of the answer + EOS padding to `gen_length`, and count how many masked answer
    tokens the model's argmax recovers. Cheap enough to track training; not the acceptance metric."""
    tok = model.tokenizer
    generator = torch.Generator().manual_seed(seed)
    hits = masked = whole = 0
    for ex in tasks.make(task, n, seed):
        prompt = chat_prompt_ids(tok, ex.prompt)
        answer = tok(ex.answer, add_special_tokens=False).input_ids[: gen_length - 1]
        response = torch.tensor(answer + [model.eos_id] * (gen_length - len(answer)))
        k = max(1, round(ratio * len(answer)))
        picked = torch.randperm(len(answer), generator=generator)[:k]
        canvas = torch.cat([torch.tensor(prompt), response]).unsqueeze(0)
        canvas[0, len(prompt) + picked] = model.mask_id
        logits = model(canvas)  # aligned: row j predicts position j
        guess = logits[0, len(prompt) + picked].argmax(-1)
        right = guess == response[picked]
        hits, masked, whole = hits + int(right.sum()), masked + k, whole + bool(right.all())
    return {"task": task, "n": n, "seed": seed, "fill_ratio": ratio, "token_accuracy": round(hits / masked, 4),
            "all_masked_right": round(whole / n, 4)}


@torch.no_grad()
def column_accuracy(model, n: int, seed: int) -> dict:
    """Teacher-forced probe of the one-digit facts, with nothing to copy: on `arith-drill` answers (no written
    digit repeats there), mask every column's computed digits at once (a product's two digits, carry-in, carry-out
    and written digit), one forward per example, and count the argmax hits per kind, the written digits also per
    operation (`sum_`, `difference_`, `product_digit_col0`…). The units column's digit depends only on its two
    visible operand digits (its carry-in is always 0): its accuracy is the share of one-digit facts the model knows
    (chance is about 10 %). Training examples are drawn (the drill has no held-out use), with a seed training
    never uses."""
    tok = model.tokenizer
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for ex in tasks.make("arith-drill", n, seed, split="train"):
        prompt = chat_prompt_ids(tok, ex.prompt)
        enc = tok(ex.answer, add_special_tokens=False, return_offsets_mapping=True)
        kind_at: dict[int, tuple[str, ...]] = {}  # character offset -> what is hidden there (kinds it counts in)
        for m in COLUMN.finditer(ex.answer):
            column = ex.answer.count(" ", ex.answer.rfind(":", 0, m.start()), m.start()) - 1
            op = {"+": "sum", "-": "difference", "*": "product"}[ex.answer[m.start() + 1]]
            kind_at.update({m.start(CARRY_IN): ("carry_in",), m.start(CARRY_OUT): ("carry_out",),
                            m.start(DIGIT): (f"digit_col{column}", f"{op}_digit_col{column}")})
            if m.start(1) != -1:  # a product column writes the product of its two digits first
                kind_at.update({m.start(1): ("one_digit_product",), m.start(2): ("one_digit_product",)})
        hidden = [(j, kind_at[a]) for j, (a, b) in enumerate(enc.offset_mapping) if b - a == 1 and a in kind_at]
        canvas = torch.tensor(prompt + enc.input_ids + [model.eos_id] * 8)
        truth = canvas.clone()
        rows = torch.tensor([len(prompt) + j for j, _ in hidden])
        canvas[rows] = model.mask_id
        guess = model(canvas.unsqueeze(0).to(model.device))[0, rows].argmax(-1).cpu()
        for (_, kinds), right in zip(hidden, (guess == truth[rows]).tolist()):
            for kind in kinds:
                hits[kind][0] += right
                hits[kind][1] += 1
    return {"probe": "columns", "n": n, "seed": seed,
            **{kind: round(h / total, 4) for kind, (h, total) in sorted(hits.items())}}


@torch.no_grad()
def column_in_context(model, n: int, seed: int, gen_length: int = 256) -> dict:
    """Teacher-forced probe of one column at a time inside held-out `arith` worked answers: the column's carry-out
    and written digit are masked, and either everything else is shown (`context`) or everything after the column
    is masked too (`future`: the canvas one-token-per-step decoding computes a column in, where no later copy of
    its result is visible yet). Per mode: the share of columns with both digits right (argmax), the mean
    probability of the true digits and the share of digits below 0.9. One forward per example and mode (its
    columns are the rows of a batch)."""
    tok = model.tokenizer
    stats = {mode: [0, 0, 0.0, 0, 0] for mode in ("context", "future")}  # columns right, columns, Σp, low, digits
    for ex in tasks.make("arith", n, seed):
        prompt = chat_prompt_ids(tok, ex.prompt)
        enc = tok(ex.answer, add_special_tokens=False, return_offsets_mapping=True)
        token_at = {a: j for j, (a, b) in enumerate(enc.offset_mapping) if b - a == 1}
        columns = [[len(prompt) + token_at[m.start(g)] for g in (CARRY_OUT, DIGIT)] for m in COLUMN.finditer(ex.answer)]
        truth = torch.tensor(prompt + enc.input_ids + [model.eos_id] * (gen_length - len(enc.input_ids)))
        if not columns or len(enc.input_ids) > gen_length:
            continue
        for mode, tally in stats.items():
            canvas = truth.repeat(len(columns), 1)
            for row, positions in enumerate(columns):
                canvas[row, positions] = model.mask_id
                if mode == "future":
                    canvas[row, positions[-1] + 1:] = model.mask_id
            probs = model(canvas.to(model.device)).float().softmax(-1).cpu()
            for row, positions in enumerate(columns):
                p_true = probs[row, positions, truth[positions]]
                right = bool((probs[row, positions].argmax(-1) == truth[positions]).all())
                tally[0] += right
                tally[1] += 1
                tally[2] += float(p_true.sum())
                tally[3] += int((p_true < 0.9).sum())
                tally[4] += len(positions)
    out = {"probe": "column_in_context", "n": n, "seed": seed}
    for mode, (right, total, p_sum, low, digits) in stats.items():
        out |= {f"{mode}_columns_right": round(right / max(1, total), 4),
                f"{mode}_mean_p": round(p_sum / max(1, digits), 4),
                f"{mode}_digits_below_0.9": round(low / max(1, digits), 4), f"{mode}_columns": total}
    return out


@torch.no_grad()
def time_forward(model, length: int = 320, repeats: int = 30) -> float:
    ids = torch.randint(0, len(model.tokenizer), (1, length))
    for _ in range(3):
        model(ids)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        model(ids)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


@torch.no_grad()
def sort_successor(model, n: int, seed: int, gen_length: int = 256) -> dict:
    """Teacher-forced probe of the one step of a sort that is not a copy, inside held-out `lists` sorts of
    numbers (the first `n` of the held-out draws): with the answer shown up to a number and everything from there
    on masked (the canvas a left-to-right decode writes that number in; where the answer ends is hidden too), the
    share of numbers whose first token the argmax gets right (`next_number`: which prompt number comes next), and,
    with the number's tens digit shown as well, the share of units digits right (`units_given_tens`: which of the
    prompt's numbers with that tens digit). One forward per example (its probes are the rows of a batch). Both
    shares are also given by the sort's length (`*_by_items`: 4–9, 10–18 and 19–32 numbers, the bins the model card
    counts whole decodes in)."""
    tok = model.tokenizer
    sorts = [ex for ex in tasks.make("lists", 20 * n, seed)
             if tasks.lists.operation(ex.prompt) == "sort" and ex.target.split()[0].isdigit()][:n]
    tally = {"next_number": [0, 0], "units_given_tens": [0, 0]}
    bins = ((4, 9), (10, 18), (19, 32))
    by_items = {(kind, lo): [0, 0] for kind in tally for lo, _ in bins}
    for ex in sorts:
        n_items = len(ex.answer.split())
        lo = next(lo for lo, hi in bins if n_items <= hi)
        prompt = chat_prompt_ids(tok, ex.prompt)
        enc = tok(ex.answer, add_special_tokens=False, return_offsets_mapping=True)
        truth = torch.tensor(prompt + enc.input_ids + [model.eos_id] * (gen_length - len(enc.input_ids)))
        covering = {a: j for j, (lo, hi) in enumerate(enc.offset_mapping) for a in range(lo, hi)}
        probes = []  # (token masked from there on, kind)
        for m in re.finditer(r"\d+", ex.answer):
            probes.append((covering[m.start()], "next_number"))
            if m.end() - m.start() >= 2:
                probes.append((covering[m.end() - 1], "units_given_tens"))
        canvas = truth.repeat(len(probes), 1)
        for row, (j, _) in enumerate(probes):
            canvas[row, len(prompt) + j:] = model.mask_id
        rows = torch.tensor([len(prompt) + j for j, _ in probes])
        guess = model(canvas.to(model.device))[torch.arange(len(probes)), rows].argmax(-1).cpu()
        for (_, kind), right in zip(probes, (guess == truth[rows]).tolist()):
            for counts in (tally[kind], by_items[kind, lo]):
                counts[0] += right
                counts[1] += 1
    return {"probe": "sort_successor", "n": len(sorts), "seed": seed,
            **{kind: round(right / max(1, total), 4) for kind, (right, total) in tally.items()},
            **{f"{kind}_count": total for kind, (_, total) in tally.items()},
            **{f"{kind}_by_items": {f"{lo}-{hi}": [round(by_items[kind, lo][0] / max(1, by_items[kind, lo][1]), 4),
                                                   by_items[kind, lo][1]] for lo, hi in bins} for kind in tally}}


def main() -> None:
    import polestar

    p = argparse.ArgumentParser(prog="python -m polestar.train.evaluate", description=__doc__)
    p.add_argument("--model", default=polestar.DEFAULT_MODEL)
    p.add_argument("--tasks", default="arith,lists")
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--skip", type=int, default=0, help="evaluate the held-out examples after the first SKIP (a run "
                   "of 300 in parts: --n 100 --skip 100 is examples 101-200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gen-length", type=int, default=256)
    p.add_argument("--block-length", type=int, default=32)
    p.add_argument("--threshold", type=float, default=None, help="confidence-threshold parallel decoding")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu or cuda (accuracy only; time the forward on the CPU)")
    p.add_argument("--fill", type=float, default=None,
                   help="teacher-forced probe instead: mask this fraction of each reference answer, one forward")
    p.add_argument("--columns", action="store_true",
                   help="teacher-forced probe of the one-digit facts instead (arith-drill, all column results masked)")
    p.add_argument("--column-context", action="store_true",
                   help="teacher-forced probe of one column at a time in held-out word problems instead, with the "
                        "rest shown and with the future masked too")
    p.add_argument("--sort-successor", action="store_true",
                   help="teacher-forced probe of held-out sorts of numbers instead: the next number and its units "
                        "digit with the rest of the answer masked")
    p.add_argument("--dump", default=None, help="append every example's row (JSON lines) to this file")
    p.add_argument("--time-forward", action="store_true", help="also time one full forward over 320 tokens")
    p.add_argument("--dtype", default=None, help="float32, bfloat16...: default as `load_model` (the stored dtype, "
                   "float32 on a CPU without native bf16); the model card's numbers name theirs")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = polestar.load_model(args.model, dtype=args.dtype, device=args.device)
    print(json.dumps({"model": args.model, "dtype": str(model.dtype).removeprefix("torch.")}), flush=True)
    if args.time_forward:
        print(json.dumps({"forward_320_ms_median": round(time_forward(model), 2), "threads": torch.get_num_threads()}))
    if args.columns:
        print(json.dumps(column_accuracy(model, args.n, args.seed + 7_000_000)), flush=True)
        return
    if args.column_context:
        print(json.dumps(column_in_context(model, args.n, args.seed, args.gen_length)), flush=True)
        return
    if args.sort_successor:
        print(json.dumps(sort_successor(model, args.n, args.seed, args.gen_length)), flush=True)
        return
    for task in filter(None, args.tasks.split(",")):  # `--tasks ''`: none (with --time-forward: only the timing)
        if args.fill is not None:
            print(json.dumps(fill_accuracy(model, task, args.n, args.seed, args.fill, args.gen_length)), flush=True)
            continue
        result = evaluate(model, task, args.n, args.seed, args.gen_length, args.block_length, args.threshold,
                          args.batch, args.skip)
        rows = result.pop("rows")
        if args.dump:
            with open(args.dump, "a") as f:
                f.writelines(json.dumps({"task": task, "threshold": args.threshold} | r) + "\n" for r in rows)
        print(json.dumps(result | {"examples": [[r["prompt"], r["completion"]] for r in rows[:3]]}), flush=True)


if __name__ == "__main__":
    main()
