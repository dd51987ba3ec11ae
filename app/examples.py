"""The app's task examples (held-out, with known answers) and its default prompt, shared by the Run, Compare and
replay code and by the analysis scripts.

Picked from the first held-out examples of seed 0 (`polestar.tasks.make(task, n, seed=0)`) so that Polestar,
with its defaults on the shipped model, shows what it does on a first Run: refresh steps, drift commits and
suffix commits of content (not only EOS). The counts each pick was chosen by are in the comments; re-check
them with `python -m app.examples` after the shipped model changes.
"""

from __future__ import annotations

from polestar import tasks
from polestar.tasks import Example

# (task, index among make(task, 40, seed=0)): word problems first; the first one is the default prompt. With
# the shipped weights (model card v12, step 24,500 of checkpoints/polestar-tiny-v21's run) and Polestar's
# defaults (`python -m app.examples --pool`), 15 of the first 40 arith answers end in the right number and 3 of
# those are right in every line; 30 of the 40 have drift commits. #12 is the default: 17 forwards, 9 refresh
# steps, 6 drift commits, 72 suffix commits, all content, every line right. #24 is right in every line too (13
# forwards, 6 refresh steps, 1 drift commit, 46 content suffix commits), and so is #19 (no drift commit, 60
# content suffix commits); #38 ends in the right number (12 drift commits, 42 content suffix commits) with a
# wrong column sum (`7+9+0=17`) and a mangled line that the canvas traces to their commits. Of the list examples
# #4 (a reversal of 15 numbers), #6 (a sort of words) and #21 (a sort of 9 numbers) are right and #38 (a sort of
# 29 numbers, 6 drift commits) is wrong; lists answers are short, and their suffix commits are nearly all EOS.
PICKS = (("arith", 12), ("arith", 24), ("arith", 19), ("arith", 38), ("lists", 4), ("lists", 6), ("lists", 21),
         ("lists", 38))
POOL = 40


def examples() -> list[Example]:
    """The app's examples in PICKS order."""
    pools = {task: tasks.make(task, POOL, seed=0) for task in dict.fromkeys(t for t, _ in PICKS)}
    return [pools[task][i] for task, i in PICKS]


def default_prompt() -> str:
    return examples()[0].prompt


def main(argv: list[str] | None = None) -> None:
    """Print Polestar's counters (defaults, shipped model) for each pick and the correctness of its answer;
    `--pool` prints them for every example of the pool instead (what a re-pick chooses from), with whether
    every line of a word problem's solution is right (`lines_right`), not only its final number."""
    import argparse
    import json

    import polestar

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--pool", action="store_true", help="every example of the pool, not only the picks")
    args = p.parse_args(argv)
    model = polestar.load_model(polestar.DEFAULT_MODEL)
    if args.pool:
        chosen = [((task, i), ex) for task in dict.fromkeys(t for t, _ in PICKS)
                  for i, ex in enumerate(tasks.make(task, POOL, seed=0))]
    else:
        chosen = list(zip(PICKS, examples()))
    for (task, i), ex in chosen:
        r = polestar.generate(model, ex.prompt, "polestar")
        print(json.dumps({"task": task, "index": i, "correct": tasks.score(task, ex, r.text),
                          "lines_right": r.text.strip() == ex.answer.strip(), "nfe": r.nfe,
                          "content_tokens": sum(t != model.eos_id for t in r.token_ids),
                          **r.counters.as_dict()}), flush=True)


if __name__ == "__main__":
    main()
