"""corpus.py - the training text, generated: the same characters on every machine, nothing downloaded.

A small world of facts written out as sentences, with patterns a character-level model learns at different speeds:
spelling (the word lists), grammar (the sentence templates), copying across a distance (a name introduced early in
a paragraph comes back later; the attention has to find it), and arithmetic (sums of two small numbers).
Python's random.Random with a fixed seed draws the same sequence on every platform and version.
"""
import random

NAMES = ["ada", "alan", "grace", "edsger", "barbara", "donald", "margaret", "john", "frances", "ken", "dennis",
         "linus", "radia", "tim", "leslie", "niklaus", "hedy", "claude", "katherine", "dorothy"]
THINGS = ["compiler", "kernel", "matrix", "tensor", "register", "warp", "cache", "pipeline", "softmax", "gradient",
          "thread", "block", "tile", "vector", "buffer", "stream", "queue", "graph", "lattice", "proof"]
ADJECTIVES = ["small", "fast", "careful", "strange", "quiet", "bright", "old", "new", "exact", "tiled", "fused",
              "patient", "curious", "simple", "deep"]
VERBS = ["writes", "reads", "tests", "builds", "tiles", "fuses", "checks", "sorts", "measures", "draws", "proves",
         "loads", "stores", "rounds", "scales"]
PLACES = ["in the lab", "at night", "on the gpu", "on the cpu", "before lunch", "in class", "by hand",
          "after the test", "with a friend", "under a tree"]


def sentence(rng, hero):
    """One sentence; about a third of them return to the paragraph's hero."""
    who = hero if rng.random() < 0.35 else rng.choice(NAMES)
    kind = rng.randrange(4)
    if kind == 0:
        return f"{who} {rng.choice(VERBS)} the {rng.choice(ADJECTIVES)} {rng.choice(THINGS)} {rng.choice(PLACES)}."
    if kind == 1:
        a, b = rng.randrange(50), rng.randrange(50)
        return f"{who} says {a} plus {b} is {a + b}."
    if kind == 2:
        return f"the {rng.choice(THINGS)} of {who} is {rng.choice(ADJECTIVES)}, and so is the {rng.choice(THINGS)}."
    return f"{who} asks {rng.choice(NAMES)} why the {rng.choice(THINGS)} {rng.choice(VERBS)} {rng.choice(PLACES)}."


def generate(n_chars, seed=1234):
    """About n_chars characters of paragraphs, each opening with its hero."""
    rng = random.Random(seed)
    parts, size = [], 0
    while size < n_chars:
        hero = rng.choice(NAMES)
        paragraph = f"this is the story of {hero}. " + " ".join(sentence(rng, hero) for _ in range(rng.randrange(3, 9)))
        parts.append(paragraph + "\n")
        size += len(paragraph) + 1
    return "".join(parts)


if __name__ == "__main__":
    print(generate(2000))
