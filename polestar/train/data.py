"""Training batches for LLaDA's SFT objective, generated on the fly from the task suite.

A sequence is the chat-templated prompt followed by the reference answer and EOS padding. Every batch has
one total length: its longest prompt plus a response length drawn per batch (`response_lengths`), so the
model learns to end answers with EOS tails on canvases of many sizes, as LLaDA does. A batch holds one task,
batch k the k-th name of `task_names` cyclically: a 250-token list prompt then never pads a batch of 60-token
word problems (mixed rows made ~40 % of a CPU batch padding). The batch size is
set so every batch holds about `token_budget` tokens. Batch `step` is a pure function of (seed, step): a
resumed run sees exactly the data it would have seen.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from polestar import tasks
from polestar.api import chat_prompt_ids


@dataclass
class Batch:
    ids: torch.Tensor  # [batch, length] token ids
    response: torch.Tensor  # [batch, length] bool: positions after the prompt (maskable, scored)
    focus: torch.Tensor | None = None  # [batch, length] bool: the answer tokens the task computes (tasks.computed)


class TaskBatcher:
    def __init__(
        self,
        tokenizer,
        eos_id: int,
        seed: int,
        token_budget: int,
        response_lengths: tuple[int, ...],
        task_names: tuple[str, ...] = ("arith", "lists"),
    ) -> None:
        self.tokenizer, self.eos_id, self.seed = tokenizer, eos_id, seed
        self.token_budget, self.response_lengths, self.task_names = token_budget, response_lengths, task_names

    def batch(self, step: int) -> Batch:
        rng = random.Random(self.seed * 1_000_003 + step)
        resp_len = rng.choice(self.response_lengths)
        task = self.task_names[step % len(self.task_names)]
        examples, prompts, longest = [], [], 0
        while True:  # as many sequences as fit the token budget at this batch's padded length
            ex = tasks.make(task, 1, seed=rng.getrandbits(48), split="train")[0]
            p = chat_prompt_ids(self.tokenizer, ex.prompt)
            if examples and (len(examples) + 1) * (max(longest, len(p)) + resp_len) > self.token_budget:
                break
            examples.append(ex)
            prompts.append(p)
            longest = max(longest, len(p))
        n = len(examples)
        encoded = self.tokenizer([ex.answer for ex in examples], add_special_tokens=False,
                                 return_offsets_mapping=True)
        answers = encoded.input_ids
        spans = [tasks.computed(task, ex.answer) for ex in examples]
        total = max(len(p) for p in prompts) + resp_len
        ids = torch.full((n, total), self.eos_id, dtype=torch.long)
        response = torch.zeros((n, total), dtype=torch.bool)
        focus = None if spans[0] is None else torch.zeros((n, total), dtype=torch.bool)
        for row, (p, a) in enumerate(zip(prompts, answers)):
            a = a[: total - len(p) - 1]  # keep at least one EOS
            ids[row, : len(p)] = torch.tensor(p)
            ids[row, len(p) : len(p) + len(a)] = torch.tensor(a, dtype=torch.long)
            response[row, len(p) :] = True
            if focus is not None:  # tokens whose text is exactly one computed character (digits are tokens)
                chars = set(spans[row])
                offsets = encoded.offset_mapping[row][: len(a)]
                hits = [len(p) + j for j, (lo, hi) in enumerate(offsets) if hi - lo == 1 and lo in chars]
                focus[row, hits] = True
        return Batch(ids=ids, response=response, focus=focus)
