"""Training: tokenizer round trip, the SFT loss falls on a micro configuration, resuming is exact, export
loads through `load_model`."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

import polestar
from polestar import tasks
from polestar.errors import ConfigError
from polestar.train.trainer import TrainConfig, export, train

MICRO = dict(d_model=32, n_layers=2, n_heads=4, mlp_hidden=64, vocab_size=400, token_budget=768,
             response_lengths=(48, 64), warmup=5, lr=3e-3, tokenizer_corpus=400, log_every=1, threads=2,
             split_digits=True, tasks=("lists",))  # v2 arith answers (median 169 tokens) do not fit 48–64


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    cfg = TrainConfig(out_dir=str(run), steps=80, ckpt_every=40, **MICRO)
    train(cfg)
    return cfg, run


def _losses(run):
    return [json.loads(line)["loss"] for line in (run / "log.jsonl").read_text().splitlines()]


def test_loss_falls(trained):
    _, run = trained
    losses = _losses(run)
    assert len(losses) == 80
    # windows of 10 steps: batches cycle through the two tasks, so each window holds both equally
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert last < 0.6 * first, (first, last)


@pytest.mark.parametrize("workers", [0, 2], ids=["in-loop batches", "batches from 2 worker processes"])
def test_resume_is_exact(trained, tmp_path, workers):
    """20 steps, stop, resume to 40 gives the same weights as 40 straight steps (same data, same schedule); the
    same when the resumed half takes its batches from worker processes (they build them out of order)."""
    cfg, run = trained
    split = TrainConfig(out_dir=str(tmp_path / "split"), steps=80, ckpt_every=40, **MICRO)
    train(split, until=40)
    assert json.loads((tmp_path / "split" / "state.json").read_text())["step"] == 40
    train(dataclasses.replace(split, workers=workers))
    a = load_file(str(run / "state.safetensors"))
    b = load_file(str(tmp_path / "split" / "state.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_export_loads_as_llada(trained, tmp_path):
    _, run = trained
    dest = export(run, tmp_path / "model")
    cfg = json.loads((dest / "config.json").read_text())
    assert cfg["architectures"] == ["LLaDAModelLM"] and cfg["max_sequence_length"] >= 1024
    model = polestar.load_model(dest)
    from polestar.models.loader import native_bf16_cpu

    # stored bf16; computed in float32 on a CPU without native bf16 (polestar.models.loader.compute_dtype)
    assert cfg["torch_dtype"] == "bfloat16" and model.spec.family == "llada"
    assert model.dtype == (torch.bfloat16 if native_bf16_cpu() else torch.float32)
    tok = model.tokenizer
    assert tok.convert_ids_to_tokens(model.mask_id) == "<|mdm_mask|>"
    for ex in tasks.make("arith", 5, 0) + tasks.make("lists", 5, 0):
        ids = tok(ex.prompt + "\n" + ex.answer, add_special_tokens=False).input_ids
        assert tok.decode(ids) == ex.prompt + "\n" + ex.answer
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_init_from_a_checkpoint_continues_its_weights(trained, tmp_path):
    """A run started from a shipped checkpoint takes its tokenizer and weights (one step away from them)."""
    _, run = trained
    shipped = export(run, tmp_path / "model")
    cont = TrainConfig(out_dir=str(tmp_path / "cont"), steps=40, init_from=str(shipped), **MICRO)
    train(cont, until=1)
    assert (tmp_path / "cont" / "tokenizer" / "tokenizer.json").read_text() == (shipped / "tokenizer.json").read_text()
    after = load_file(str(tmp_path / "cont" / "state.safetensors"))["model/embed_tokens.weight"]
    start = polestar.load_model(shipped, dtype=torch.float32).embed_tokens.weight
    assert (after - start).abs().max() < 0.05 * start.abs().max()


def test_init_from_with_a_new_tokenizer_moves_rows_by_token_string(trained, tmp_path):
    """A run that starts from a digit-split checkpoint with merged numbers keeps every shared token's rows and
    starts a merged number from the mean of its digits' rows; the layers are copied as they are."""
    from transformers import PreTrainedTokenizerFast

    _, run = trained
    shipped = export(run, tmp_path / "model")
    merged = TrainConfig(out_dir=str(tmp_path / "merged"), steps=40, init_from=str(shipped), new_tokenizer=True,
                         **(MICRO | {"split_digits": False, "vocab_size": 500}))
    train(merged, until=1)
    old = polestar.load_model(shipped, dtype=torch.float32)
    new_tok = PreTrainedTokenizerFast.from_pretrained(str(tmp_path / "merged" / "tokenizer"))
    number = next(t for t in sorted(new_tok.get_vocab()) if t.lstrip("Ġ").isdigit() and len(t.lstrip("Ġ")) >= 2)
    new_ids = [new_tok.convert_tokens_to_ids(number)]
    old_ids = old.tokenizer(new_tok.convert_tokens_to_string([number]), add_special_tokens=False).input_ids
    assert len(old_ids) >= 2  # one token per digit in the checkpoint's vocabulary
    word = next(t for t in sorted(new_tok.get_vocab()) if t.startswith("Ġ") and t[1:].isalpha() and len(t) > 4
                and t in old.tokenizer.get_vocab())  # a word both vocabularies hold whole
    list_new, list_old = new_tok.convert_tokens_to_ids(word), old.tokenizer.convert_tokens_to_ids(word)
    after = load_file(str(tmp_path / "merged" / "state.safetensors"))
    emb, before = after["model/embed_tokens.weight"], old.embed_tokens.weight
    # Adam's first step moves a weight by at most lr (|m̂/√v̂| ≤ 1) plus the decay lr·λ·|w|
    step = MICRO["lr"] * (1 + merged.weight_decay * before.abs().max()) * 1.001
    assert (emb[list_new] - before[list_old]).abs().max() <= step
    assert (emb[new_ids[0]] - before[old_ids].mean(0)).abs().max() <= step
    wo, wo_before = after["model/layers.0.wo.weight"], old.layers[0].wo.weight
    assert (wo - wo_before).abs().max() <= MICRO["lr"] * (1 + merged.weight_decay * wo_before.abs().max()) * 1.001


def test_task_mix_and_stratified_mask_ratios(trained):
    """`tasks` picks the rows' tasks (a single-task phase sees only that task); an unknown name is refused; the
    SFT loss draws one mask ratio per row from each of b equal slices of U(ε, 1)."""
    from transformers import PreTrainedTokenizerFast

    from polestar.errors import ConfigError
    from polestar.train.data import TaskBatcher
    from polestar.train.trainer import sft_loss

    _, run = trained
    tok = PreTrainedTokenizerFast.from_pretrained(str(run / "tokenizer"))
    batch = TaskBatcher(tok, tok.eos_token_id, 0, 2048, (48,), ("lists",)).batch(3)
    text = tok.batch_decode(batch.ids)
    assert all("####" not in t for t in text) and any("list" in t.lower() for t in text)
    with pytest.raises(ConfigError, match="tasks must name tasks from arith, lists"):
        TrainConfig(tasks=("poetry",))

    class Recorder(torch.nn.Module):  # stands in for the model: records which positions were masked
        def forward(self, noisy):
            self.noisy = noisy
            return torch.zeros(*noisy.shape, 8, requires_grad=True)

    b, length = 64, 4000
    ids = torch.ones(b, length, dtype=torch.long)
    model = Recorder()
    sft_loss(model, ids, torch.ones(b, length, dtype=torch.bool), 7, 0.001, torch.Generator().manual_seed(0))
    ratios = (model.noisy == 7).float().mean(1).sort().values
    slices = (torch.arange(b) + 0.5) / b
    assert (ratios - slices).abs().max() < 0.5 / b + 0.03  # one ratio per slice (binomial noise ~0.008 at 4000)


@pytest.mark.parametrize("bad", [dict(device="gpu"), dict(device="cuda0"), dict(workers=-1)])
def test_bad_device_or_workers_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        TrainConfig(**bad)


def test_compact_state_resumes_the_run(trained, tmp_path):
    """The committed form of a run (bf16 moments) resumes on the same schedule: the weights are restored exactly,
    the moments to bf16's rounding, and training goes on from the saved step."""
    from polestar.train.trainer import compact

    cfg, run = trained
    small = compact(run, tmp_path / "small")
    full, packed = load_file(str(run / "state.safetensors")), load_file(str(small / "state.safetensors"))
    assert (small / "state.safetensors").stat().st_size < 0.7 * (run / "state.safetensors").stat().st_size
    for key, value in full.items():
        if key.startswith("opt/exp_avg"):
            assert packed[key].dtype == torch.bfloat16
            # bf16 keeps 8 significant bits: relative error ≤ 2^-8 per element
            assert ((packed[key].float() - value).abs() <= value.abs() * 2**-8).all(), key
        else:
            assert torch.equal(packed[key], value), key
    train(dataclasses.replace(cfg, out_dir=str(small), steps=90, ckpt_every=5), until=85)
    assert json.loads((small / "state.json").read_text())["step"] == 85


def _rows_of_content(b: int, length: int, start: int, content: int, eos: int):
    """ids [b, length] (a prompt of `start` tokens, `content` answer tokens, then EOS) and the response mask."""
    ids = torch.ones(b, length, dtype=torch.long)
    ids[:, start + content:] = eos
    response = torch.zeros(b, length, dtype=torch.bool)
    response[:, start:] = True
    return ids, response


def test_block_causal_rows_mask_a_clean_prefix_one_block_and_all_after():
    """With block_rows=1 every row shows whole clean blocks, one block masked with its ratio, everything after it
    masked; the block starts at a multiple of the block length from the response start, at or before the block
    where the EOS tail starts; only that block's positions are scored."""
    from polestar.train.trainer import sft_loss

    class Recorder(torch.nn.Module):
        def forward(self, noisy):
            self.noisy = noisy
            self.logits = torch.zeros(*noisy.shape, 8, requires_grad=True)
            return self.logits

    b, length, start, content, block, eos, mask = 32, 300, 20, 150, 32, 0, 7
    ids, response = _rows_of_content(b, length, start, content, eos)
    model = Recorder()
    loss = sft_loss(model, ids, response, mask, 0.001, torch.Generator().manual_seed(0), 1.0, block, eos)
    loss.backward()
    scored = model.logits.grad.abs().sum(-1) > 0
    firsts = set()
    for row in range(b):
        masked = (model.noisy[row] == mask).nonzero().flatten()
        hits = scored[row].nonzero().flatten()
        # the block: where the scored positions are; a block whose low ratio masked nothing leaves the tail only
        first = int(hits.min() if len(hits) else masked.min() - block) - start
        j = first // block
        firsts.add(j)
        assert 0 <= j <= content // block
        lo, hi = start + j * block, start + (j + 1) * block
        assert not (model.noisy[row, :lo] == mask).any()  # clean prefix (and the prompt)
        assert (model.noisy[row, hi:] == mask).all()  # everything after the block
        assert not scored[row, :lo].any() and not scored[row, hi:].any()
        assert torch.equal(scored[row, lo:hi], model.noisy[row, lo:hi] == mask)  # every masked block position
    assert len(firsts) > 2  # the masked block is drawn, not fixed


def test_focus_rows_mask_and_score_only_the_computed_digits():
    """With focus_rows=1 every row that has focus tokens masks only those (each with its ratio t) and scores
    exactly what it masked; a row without focus tokens keeps uniform masking. The drill's focus is every column's
    carry-in, carry-out and written digit, and a product column's two product digits."""
    from transformers import PreTrainedTokenizerFast

    import polestar
    from polestar.train.data import TaskBatcher
    from polestar.train.trainer import sft_loss

    tok = PreTrainedTokenizerFast.from_pretrained(polestar.DEFAULT_MODEL)
    batch = TaskBatcher(tok, 0, seed=3, token_budget=2048, response_lengths=(256,),
                        task_names=("arith-drill",)).batch(0)
    row = batch.ids[0][batch.focus[0]]
    ex_digits = "".join(tok.decode(row))
    answer = tok.decode(batch.ids[0][batch.response[0]], skip_special_tokens=True)
    # 3 per column (carry-in, carry-out, digit), and a product column's own two digits
    assert ex_digits.isdigit() and len(ex_digits) == 3 * 3 * answer.count(":") + 3 * 2 * answer.count(" * ")
    assert TaskBatcher(tok, 0, 3, 2048, (256,), ("lists",)).batch(0).focus is None
    sorts = TaskBatcher(tok, 0, 3, 2048, (256,), ("lists-sort",)).batch(0)
    assert sorts.focus.any(1).sum() >= 2  # this seed's batch holds lists of numbers
    for ids, response, focus in zip(sorts.ids, sorts.response, sorts.focus):
        answer = tok.decode(ids[response], skip_special_tokens=True)
        numbers = [w for w in answer.split() if w.isdigit() and len(w) > 1]
        assert tok.decode(ids[focus]) == "".join(w[-1] for w in numbers)  # each two-digit number's units digit

    class Recorder(torch.nn.Module):
        def forward(self, noisy):
            self.noisy = noisy
            self.logits = torch.zeros(*noisy.shape, len(tok), requires_grad=True)
            return self.logits

    focus = batch.focus.clone()
    focus[-1] = False  # a row with nothing marked
    model = Recorder()
    sft_loss(model, batch.ids, batch.response, 2, 0.001, torch.Generator().manual_seed(0), eos_id=0,
             focus=focus, focus_rows=1.0).backward()
    masked = model.noisy == 2
    scored = model.logits.grad.abs().sum(-1) > 0
    assert not (masked[:-1] & ~focus[:-1]).any()  # nothing but focus tokens is masked in a focus row
    assert torch.equal(scored[:-1], masked[:-1])
    assert masked[:-1].any(1).float().mean() > 0.8  # ratios t ~ U(0, 1) over ~45 focus tokens: nearly every row
    assert (masked[-1] & ~focus[-1]).any()  # uniform masking where no focus is marked


def test_focus_block_rows_compute_one_block_with_the_future_masked():
    """With focus_rows=1 and focus_block_rows=1 every row with focus tokens shows its response clean up to a block
    j that holds focus tokens (j·B from the response start), masks only focus tokens inside block j, masks all of
    the response after it, and scores exactly block j's masked focus tokens; j varies over the rows."""
    from transformers import PreTrainedTokenizerFast

    import polestar
    from polestar.train.data import TaskBatcher
    from polestar.train.trainer import sft_loss

    tok = PreTrainedTokenizerFast.from_pretrained(polestar.DEFAULT_MODEL)
    batch = TaskBatcher(tok, 0, seed=5, token_budget=4096, response_lengths=(256,), task_names=("arith",)).batch(0)

    class Recorder(torch.nn.Module):
        def forward(self, noisy):
            self.noisy = noisy
            self.logits = torch.zeros(*noisy.shape, len(tok), requires_grad=True)
            return self.logits

    block = 32
    model = Recorder()
    sft_loss(model, batch.ids, batch.response, 2, 0.001, torch.Generator().manual_seed(0), block_length=block,
             eos_id=0, focus=batch.focus, focus_rows=1.0, focus_block_rows=1.0).backward()
    masked = model.noisy == 2
    scored = model.logits.grad.abs().sum(-1) > 0
    blocks = set()
    for row in range(batch.ids.shape[0]):
        response = batch.response[row].nonzero().flatten()
        start, end = int(response[0]), int(response[-1]) + 1
        tail = masked[row, start:end].long()
        # the masked future: from some position on, every response position is masked; it may begin inside block
        # j (its last focus tokens masked), never before it (block j shows layout tokens), so j ends at the next
        # block boundary
        run = end - int(tail.flip(0).cumprod(0).sum())
        cut = start + -(-(run - start) // block) * block
        first = cut - block
        assert first >= start
        blocks.add((first - start) // block)
        assert not masked[row, start:first].any()  # the blocks before j are clean
        assert batch.focus[row, first:cut].any()  # block j holds focus tokens
        in_block = masked[row, first:cut]
        assert not (in_block & ~batch.focus[row, first:cut]).any()  # inside j only focus tokens are masked
        assert torch.equal(scored[row], torch.nn.functional.pad(in_block, (first, len(scored[row]) - cut)))
        # the row's loss is the mean cross-entropy of what it scores: with uniform logits each scored token's true
        # logit gets the gradient −(1 − 1/V) / (count · batch)
        hits = scored[row].nonzero().flatten()
        grads = model.logits.grad[row, hits, batch.ids[row, hits]]
        expected = -(1 - 1 / len(tok)) / (len(hits) * batch.ids.shape[0])
        # float32: the softmax, the scale and the mean each round once or twice
        tolerance = 16 * torch.finfo(torch.float32).eps
        torch.testing.assert_close(grads, torch.full_like(grads, expected), rtol=tolerance, atol=0)
        assert not masked[row, :start].any()  # the prompt is never masked
    assert len(blocks) >= 3


def test_column_probe_sorts_hidden_digits_by_kind():
    """`evaluate.column_accuracy` hides every computed digit of the drill's columns and scores each kind apart:
    against a stand-in model that predicts the answer exactly except on product lines, every product kind scores
    0, every sum and difference kind 1, and the kinds all operations share lie strictly between."""
    from types import SimpleNamespace

    from polestar.api import chat_prompt_ids
    from polestar.train.evaluate import column_accuracy

    embedded = polestar.load_model(polestar.DEFAULT_MODEL)
    tok = embedded.tokenizer
    n, seed = 6, 11
    truths = {}  # prompt ids -> the full unmasked canvas, as column_accuracy lays it out
    for ex in tasks.make("arith-drill", n, seed, split="train"):
        prompt, answer = chat_prompt_ids(tok, ex.prompt), tok(ex.answer, add_special_tokens=False).input_ids
        truths[tuple(prompt)] = (len(prompt), ex.answer, torch.tensor(prompt + answer + [1] * 8))

    def forward(canvas):
        for prompt, (p, answer, truth) in truths.items():
            if tuple(canvas[0, :p].tolist()) == prompt:
                break
        logits = torch.nn.functional.one_hot(truth, len(tok)).float().unsqueeze(0)
        line = 0
        for j, piece in enumerate(tok.convert_ids_to_tokens(truth[p:].tolist())):
            if "*" in answer.split("\n")[min(line, answer.count("\n"))]:
                logits[0, p + j] = logits[0, p + j].roll(1)  # wrong on every token of a product line
            line += piece.count("Ċ") + piece.count("\n")
        return logits

    class Oracle(SimpleNamespace):
        def __call__(self, canvas):
            return forward(canvas)

    model = Oracle(tokenizer=tok, mask_id=embedded.mask_id, eos_id=1, device="cpu")
    scores = column_accuracy(model, n, seed)
    assert scores["one_digit_product"] == 0 and all(scores[f"product_digit_col{c}"] == 0 for c in range(3))
    assert all(scores[f"{op}_digit_col{c}"] == 1 for op in ("sum", "difference") for c in range(3)
               if f"{op}_digit_col{c}" in scores)
    assert any(k.startswith("sum_") for k in scores) and any(k.startswith("difference_") for k in scores)
    assert 0 < scores["carry_in"] < 1 and 0 < scores["digit_col0"] < 1


def test_column_in_context_probe_separates_shown_and_masked_futures():
    """`evaluate.column_in_context` masks one column's two result digits per batch row, with the rest shown or
    with everything after the column masked too: a stand-in model that reads each masked digit from the reference
    canvas only when the token two places on is visible (a model that copies from the future) gets every column
    right in context and none with the future masked."""
    from types import SimpleNamespace

    from polestar.api import chat_prompt_ids
    from polestar.train.evaluate import column_in_context

    embedded = polestar.load_model(polestar.DEFAULT_MODEL)
    tok, mask, n = embedded.tokenizer, embedded.mask_id, 3
    truths = {}
    for ex in tasks.make("arith", n, 0):
        prompt, answer = chat_prompt_ids(tok, ex.prompt), tok(ex.answer, add_special_tokens=False).input_ids
        truths[tuple(prompt)] = torch.tensor(prompt + answer + [0] * (256 - len(answer)))

    class FutureCopier(SimpleNamespace):
        def __call__(self, canvas):
            truth = next(t for prompt, t in truths.items() if tuple(canvas[0, :len(prompt)].tolist()) == prompt)
            logits = 50.0 * torch.nn.functional.one_hot(truth, len(tok)).float().repeat(canvas.shape[0], 1, 1)
            blind = torch.zeros_like(canvas, dtype=torch.bool)
            blind[:, :-2] = (canvas[:, :-2] == mask) & (canvas[:, 2:] == mask)
            logits[blind] = logits[blind].roll(1, -1)  # wrong where the token two places on is masked too
            return logits

    scores = column_in_context(FutureCopier(tokenizer=tok, mask_id=mask, eos_id=0, device="cpu"), n, 0)
    assert scores["context_columns"] == scores["future_columns"] > 3 * n
    assert scores["context_columns_right"] == 1 and scores["context_digits_below_0.9"] == 0
    assert scores["future_columns_right"] == 0 and scores["future_digits_below_0.9"] == 1


def test_sort_successor_probe_masks_from_each_number_on_and_scores_each_kind():
    """`evaluate.sort_successor`: each batch row shows the reference sort up to one number (or up to its units
    digit) and masks everything after; a stand-in model that checks exactly that, then answers right on every
    number's first token and wrong on every units digit, scores 1 and 0, one probe per number and per number of
    two or more digits."""
    import re
    from types import SimpleNamespace

    from polestar.api import chat_prompt_ids
    from polestar.train.evaluate import sort_successor

    embedded = polestar.load_model(polestar.DEFAULT_MODEL)
    tok, mask, n = embedded.tokenizer, embedded.mask_id, 4
    sorts = [ex for ex in tasks.make("lists", 200, 0) if ex.prompt.startswith(("Sort", "Put"))
             and ex.target.split()[0].isdigit()][:n]
    truths = {}
    for ex in sorts:
        prompt, answer = chat_prompt_ids(tok, ex.prompt), tok(ex.answer, add_special_tokens=False).input_ids
        truths[tuple(prompt)] = (len(prompt), torch.tensor(prompt + answer + [0] * (256 - len(answer))))

    class Checker(SimpleNamespace):
        def __call__(self, canvas):
            start, truth = next(v for prompt, v in truths.items() if tuple(canvas[0, :len(prompt)].tolist()) == prompt)
            logits = 50.0 * torch.nn.functional.one_hot(truth, len(tok)).float().repeat(canvas.shape[0], 1, 1)
            for row in range(canvas.shape[0]):
                first = int((canvas[row] == mask).nonzero()[0])
                assert first >= start and (canvas[row, first:] == mask).all()
                assert torch.equal(canvas[row, :first], truth[:first])
                if first > start and re.fullmatch(r"\d", tok.decode([int(truth[first])])):  # a units digit
                    logits[row, first] = logits[row, first].roll(1)
            return logits

    scores = sort_successor(Checker(tokenizer=tok, mask_id=mask, eos_id=0, device="cpu"), n, 0)
    assert scores["n"] == n and scores["next_number"] == 1 and scores["units_given_tens"] == 0
    assert scores["next_number_count"] == sum(len(ex.target.split()) for ex in sorts)
    assert scores["units_given_tens_count"] == sum(len(x) >= 2 for ex in sorts for x in ex.target.split())
    by_items = scores["next_number_by_items"]  # the same probes, binned by the sort's length
    assert sum(count for _, count in by_items.values()) == scores["next_number_count"]
    assert all(share == 1 for share, count in by_items.values() if count)
    assert all(share == 0 for share, count in scores["units_given_tens_by_items"].values() if count)


def test_order_rows_unmask_a_share_of_one_block_most_confident_first():
    """With order_rows=1 every row shows clean blocks before a block j, everything after it masked, and inside it a
    share of positions unmasked with their reference tokens, the ones the model is most confident of first (here
    a model whose confidence rises, or falls, with the position: the unmasked positions are the block's last, or
    first, ones); exactly block j's still-masked positions are scored, with the model called once per round and
    once for the loss."""
    from polestar.train.trainer import sft_loss

    class Ranked(torch.nn.Module):
        def __init__(self, rising: bool) -> None:
            super().__init__()
            self.rising, self.calls = rising, 0

        def forward(self, noisy):
            self.calls += 1
            self.noisy = noisy
            pos = torch.arange(noisy.shape[1], dtype=torch.float)
            sharp = (pos if self.rising else -pos) * 0.01 + 5.0
            self.logits = torch.zeros(*noisy.shape, 8)
            self.logits[..., 3] = sharp
            self.logits.requires_grad_(True)
            return self.logits

    b, length, start, content, block, eos, mask = 24, 300, 20, 150, 32, 0, 7
    ids, response = _rows_of_content(b, length, start, content, eos)
    for rising in (True, False):
        model = Ranked(rising)
        sft_loss(model, ids, response, mask, 0.001, torch.Generator().manual_seed(1), block_length=block, eos_id=eos,
                 order_rows=1.0, order_rounds=2).backward()
        assert model.calls == 3
        scored = model.logits.grad.abs().sum(-1) > 0
        masked = model.noisy == mask
        shares, blocks = set(), set()
        for row in range(b):
            first = start + block * int((~masked[row, start:]).sum() // block)  # clean blocks, then block j's share
            lo, hi = first, first + block
            blocks.add((lo - start) // block)
            assert not masked[row, :lo].any() and masked[row, hi:].all()
            assert torch.equal(scored[row], masked[row] & (torch.arange(length) < hi))
            inside = masked[row, lo:hi]
            kept = int((~inside).sum())
            shares.add(kept)
            expect = torch.arange(block) < block - kept if rising else torch.arange(block) >= kept
            assert torch.equal(inside, expect)
        assert len(blocks) > 2 and len(shares) > 5  # the block and the share are drawn


def test_evaluate_in_parts_decodes_what_one_run_decodes():
    """`evaluate(..., skip=k)` scores the held-out examples after the first k, each decoded as in one run over all
    of them (the rows of a batch are independent): examples 2-3 alone match a run over 1-3."""
    import polestar
    from polestar.train.evaluate import evaluate

    model = polestar.load_model(polestar.DEFAULT_MODEL)
    whole = evaluate(model, "arith", 3, 0, 64, 32, 0.9, 16)
    part = evaluate(model, "arith", 2, 0, 64, 32, 0.9, 16, skip=1)
    assert part["skip"] == 1 and part["n"] == 2
    assert part["rows"] == whole["rows"][1:]
