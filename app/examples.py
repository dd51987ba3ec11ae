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
# the shipped weights (v3, step 2,700) and Polestar's defaults, arith #7 ran 27 forwards with 15 refresh steps,
# 16 drift commits and 70 suffix commits (39 of them content, not EOS) and got the answer right; arith #3, #6 and
# #11 are right too, with 9–18 refresh steps, 4–15 drift commits and 38–50 content suffix commits. Of the list
# examples #0, #1 and #5 are right and #2 is wrong; lists commit few tokens from the suffix, all EOS.
PICKS = (("arith", 7), ("arith", 3), ("arith", 6), ("arith", 11), ("lists", 0), ("lists", 1), ("lists", 5),
         ("lists", 2))
POOL = 40


def examples() -> list[Example]:
    """The app's examples in PICKS order."""
    pools = {task: tasks.make(task, POOL, seed=0) for task in dict.fromkeys(t for t, _ in PICKS)}
    return [pools[task][i] for task, i in PICKS]


def default_prompt() -> str:
    return examples()[0].prompt


def main() -> None:
    """Print Polestar's counters (defaults, shipped model) for each pick and the correctness of its answer."""
    import json

    import polestar

    model = polestar.load_model(polestar.DEFAULT_MODEL)
    for (task, i), ex in zip(PICKS, examples()):
        r = polestar.generate(model, ex.prompt, "polestar")
        print(json.dumps({"task": task, "index": i, "correct": tasks.score(task, ex, r.text), "nfe": r.nfe,
                          **r.counters.as_dict()}), flush=True)


if __name__ == "__main__":
    main()
