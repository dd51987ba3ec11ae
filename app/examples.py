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
# the shipped weights (model card v4, checkpoints/polestar-tiny-v6 at step 4,200) and Polestar's defaults, the
# arith picks are the four of the first 40 whose every solution line is right (not only the final number): #34
# runs 22 forwards with 12 refresh steps, 9 drift commits and 79 suffix commits (26 of them content, not EOS);
# it is the default as the shortest of the four, which finishes within the app's 5 s on a busy 2-core CPU
# (`python -m analysis.app_timing`: 4.0 s). #35, #8 and #6 run 24–29 forwards with 11–18 refresh steps, 6–27
# drift commits and 42–54 content suffix commits. Of the list examples #27, #22 and #4 are right and #2 is wrong;
# #27 commits 15 content tokens from the suffix (Fast-dLLM needs 104 forwards on it and gets it wrong), the
# others only EOS.
PICKS = (("arith", 34), ("arith", 35), ("arith", 8), ("arith", 6), ("lists", 27), ("lists", 22), ("lists", 4),
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
