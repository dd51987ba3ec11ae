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
# the shipped weights (step 2,000) and Polestar's defaults, arith #0 ran 72 forwards with 33 refresh steps, 36
# drift commits and 45 suffix commits, none of them EOS; arith #1–3 had 30–37 refreshes, 25–33 drift commits
# and 30–38 content suffix commits; the list examples mostly commit EOS tails from the suffix.
PICKS = (("arith", 0), ("arith", 1), ("arith", 2), ("arith", 3), ("lists", 0), ("lists", 1), ("lists", 2),
         ("lists", 3))
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
