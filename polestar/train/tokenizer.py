"""A byte-level BPE tokenizer trained on the task corpus, saved in Hugging Face layout with LLaDA's special
tokens and a LLaDA-style chat template, so it loads through AutoTokenizer exactly like the real checkpoints.

Digits are split one per token (a space before a digit stays with it, so ` 45` is ` 4` + `5`): the model then
learns place-value arithmetic from the 100 one-digit facts instead of memorising a token per number.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL_TOKENS = {
    "eos": "<|endoftext|>",
    "bos": "<|startoftext|>",
    "mask": "<|mdm_mask|>",
    "header_start": "<|start_header_id|>",
    "header_end": "<|end_header_id|>",
    "eot": "<|eot_id|>",
}
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def train_tokenizer(corpus: list[str], vocab_size: int, out_dir: Path, split_digits: bool = True) -> dict[str, int]:
    """Train on `corpus`, write tokenizer.json + tokenizer_config.json into `out_dir`; return special ids.
    `split_digits=False` lets BPE merge frequent numbers into single tokens (' 41' is one token)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    one_digit = pre_tokenizers.Split(Regex(r" ?[0-9]"), behavior="isolated")
    tok.pre_tokenizer = pre_tokenizers.Sequence([one_digit, byte_level]) if split_digits else byte_level
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS["bos"],
        "eos_token": SPECIAL_TOKENS["eos"],
        "pad_token": SPECIAL_TOKENS["eos"],
        "mask_token": SPECIAL_TOKENS["mask"],
        "additional_special_tokens": [SPECIAL_TOKENS[k] for k in ("header_start", "header_end", "eot")],
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 1024,
        "clean_up_tokenization_spaces": False,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return {name: tok.token_to_id(text) for name, text in SPECIAL_TOKENS.items()}
