"""``gencode`` tier 2: a loop with a condition, a small dict or string walk."""

from __future__ import annotations

import random

from teamrl.tasks.coding.gen_templates import (
    SENTENCE,
    WORDS,
    Helper,
    Spec,
    distinct,
    int_list,
    ints,
    many,
    sentence,
    template,
    unary,
    word_list,
)


@template("sum_multiples", 2)
def _sum_multiples(r: random.Random) -> Spec:
    k = r.randint(2, 5)
    return unary(
        r,
        ["sum_multiples", "sum_divisible"],
        int_list(),
        "int",
        f"Return the sum of the numbers in xs that are divisible by {k}.",
        "return sum(x for x in xs if aux(x))",
        Helper("x: int", "bool", f"True if x is divisible by {k}", f"return x % {k} == 0"),
    )


@template("count_vowels", 2)
def _count_vowels(r: random.Random) -> Spec:
    return Spec(
        r.choice(["count_vowels", "vowel_count"]),
        "s: str",
        "int",
        "Return how many vowels (a, e, i, o, u, upper or lower case) s contains.",
        "return sum(1 for c in s if aux(c))",
        many(lambda: "".join(c.upper() if r.random() < 0.3 else c for c in sentence(r))),
        Helper(
            "c: str", "bool", "True if the character c is a vowel", 'return c.lower() in "aeiou"'
        ),
    )


@template("reverse_words", 2)
def _reverse_words(r: random.Random) -> Spec:
    return unary(
        r,
        ["reverse_words", "words_backwards"],
        SENTENCE,
        "str",
        "Return the words of s (separated by single spaces) in reverse order, joined by "
        "single spaces.",
        'return " ".join(reversed(s.split(" ")))',
    )


@template("clamp_values", 2)
def _clamp_values(r: random.Random) -> Spec:
    lo = r.randint(-3, 3)
    hi = lo + r.randint(2, 8)
    return unary(
        r,
        ["clamp_all", "clip_values"],
        int_list(-10, 15),
        "List[int]",
        f"Return xs with every number below {lo} replaced by {lo} and every number above "
        f"{hi} replaced by {hi}.",
        "return [aux(x) for x in xs]",
        Helper(
            "x: int", "int", f"x limited to the range {lo}..{hi}", f"return max({lo}, min({hi}, x))"
        ),
    )


@template("word_counts", 2)
def _word_counts(r: random.Random) -> Spec:
    return Spec(
        r.choice(["word_counts", "count_words"]),
        "ws: List[str]",
        "Dict[str, int]",
        "Return a dict mapping each word of ws to the number of times it appears.",
        "d = {}\nfor w in ws:\n    d[w] = d.get(w, 0) + 1\nreturn d",
        many(lambda: [r.choice(WORDS[:5]) for _ in range(r.randint(0, 7))]),
    )


@template("keep_above", 2)
def _keep_above(r: random.Random) -> Spec:
    t = r.randint(0, 10)
    return unary(
        r,
        ["keep_above", "filter_big"],
        int_list(),
        "List[int]",
        f"Return the numbers of xs that are greater than {t}, in order.",
        f"return [x for x in xs if x > {t}]",
    )


@template("count_below", 2)
def _count_below(r: random.Random) -> Spec:
    t = r.randint(-2, 8)
    return unary(
        r,
        ["count_below", "how_many_small"],
        int_list(),
        "int",
        f"Return how many numbers of xs are less than {t}.",
        f"return len([x for x in xs if x < {t}])",
    )


@template("replace_char", 2)
def _replace_char(r: random.Random) -> Spec:
    a, b = r.sample("aeioustn", 2)
    return unary(
        r,
        ["replace_letter", "swap_char"],
        SENTENCE,
        "str",
        f"Return s with every {a!r} replaced by {b!r}.",
        f"return s.replace({a!r}, {b!r})",
    )


@template("remove_char", 2)
def _remove_char(r: random.Random) -> Spec:
    a = r.choice("aeiornt")
    return unary(
        r,
        ["remove_letter", "strip_char"],
        SENTENCE,
        "str",
        f"Return s with every {a!r} removed.",
        f"return s.replace({a!r}, '')",
    )


@template("capitalize_words", 2)
def _capitalize_words(r: random.Random) -> Spec:
    return unary(
        r,
        ["capitalize_words", "title_words"],
        SENTENCE,
        "str",
        "Return s (lower-case words separated by single spaces) with the first letter of each "
        "word in upper case.",
        'return " ".join(aux(w) for w in s.split(" "))',
        Helper(
            "w: str",
            "str",
            "the word w with its first letter in upper case",
            "return w[:1].upper() + w[1:]",
        ),
    )


@template("longest_word", 2)
def _longest_word(r: random.Random) -> Spec:
    return unary(
        r,
        ["longest_word", "biggest_word"],
        word_list((1, 6)),
        "str",
        "Return the longest word of ws (the first one on a tie; ws is never empty).",
        "best = ws[0]\nfor w in ws:\n    if len(w) > len(best):\n        best = w\nreturn best",
    )


@template("pair_sums", 2)
def _pair_sums(r: random.Random) -> Spec:
    return unary(
        r,
        ["pair_sums", "neighbour_sums"],
        int_list(),
        "List[int]",
        "Return the list of xs[i] + xs[i + 1] for every i (empty if xs has under 2 items).",
        "return [xs[i] + xs[i + 1] for i in range(len(xs) - 1)]",
    )


@template("running_total", 2)
def _running_total(r: random.Random) -> Spec:
    return unary(
        r,
        ["running_total", "prefix_sums"],
        int_list(),
        "List[int]",
        "Return the running totals of xs: item i is the sum of xs[0] .. xs[i].",
        "out = []\nt = 0\nfor x in xs:\n    t += x\n    out.append(t)\nreturn out",
    )


@template("count_long_words", 2)
def _count_long_words(r: random.Random) -> Spec:
    t = r.randint(3, 5)
    return unary(
        r,
        ["count_long_words", "long_word_count"],
        SENTENCE,
        "int",
        f"Return how many words of s (separated by spaces) have more than {t} letters.",
        "return sum(1 for w in s.split() if aux(w))",
        Helper(
            "w: str",
            "bool",
            f"True if the word w has more than {t} letters",
            f"return len(w) > {t}",
        ),
    )


@template("digit_sums", 2)
def _digit_sums(r: random.Random) -> Spec:
    return unary(
        r,
        ["digit_sums", "sum_of_digits_each"],
        int_list(0, 999),
        "List[int]",
        "Return the list of the digit sums of the non-negative numbers in xs, in order.",
        "return [aux(x) for x in xs]",
        Helper(
            "n: int",
            "int",
            "the sum of the decimal digits of n >= 0",
            "return sum(int(d) for d in str(n))",
        ),
    )


@template("first_index_above", 2)
def _first_index_above(r: random.Random) -> Spec:
    t = r.randint(0, 10)
    return unary(
        r,
        ["first_index_above", "find_big"],
        int_list(),
        "int",
        f"Return the index of the first number of xs greater than {t}, or -1 if there is none.",
        f"for i, x in enumerate(xs):\n    if x > {t}:\n        return i\nreturn -1",
    )


@template("unique_in_order", 2)
def _unique_in_order(r: random.Random) -> Spec:
    return unary(
        r,
        ["unique_in_order", "drop_repeats"],
        int_list(0, 5, (0, 9)),
        "List[int]",
        "Return the numbers of xs without repeats, each kept where it first appears.",
        "out = []\nfor x in xs:\n    if x not in out:\n        out.append(x)\nreturn out",
    )


@template("invert_dict", 2)
def _invert_dict(r: random.Random) -> Spec:
    def make() -> dict:
        keys = r.sample(WORDS, r.randint(0, 4))
        return dict(zip(keys, r.sample(range(1, 30), len(keys))))

    return Spec(
        r.choice(["invert", "swap_keys_values"]),
        "d: Dict[str, int]",
        "Dict[int, str]",
        "Return a dict that maps each value of d to its key (the values are all different).",
        "return {v: k for k, v in d.items()}",
        many(make),
    )


@template("keys_above", 2)
def _keys_above(r: random.Random) -> Spec:
    t = r.randint(2, 8)

    def make() -> dict:
        keys = r.sample(WORDS, r.randint(0, 5))
        return {k: r.randint(0, 12) for k in keys}

    return Spec(
        r.choice(["keys_above", "big_keys"]),
        "d: Dict[str, int]",
        "List[str]",
        f"Return the keys of d whose value is greater than {t}, sorted alphabetically.",
        f"return sorted(k for k, v in d.items() if v > {t})",
        many(make),
    )


@template("fizz_labels", 2)
def _fizz_labels(r: random.Random) -> Spec:
    a = r.randint(2, 5)
    word = r.choice(["Fizz", "Buzz", "Ping", "Zap"])
    return unary(
        r,
        ["labels", "fizz_labels"],
        int_list(1, 30),
        "List[str]",
        f"Return a list with {word!r} for each number of xs divisible by {a}, and the number "
        "written as a string otherwise.",
        "return [aux(x) for x in xs]",
        Helper(
            "x: int",
            "str",
            f"{word!r} if x is divisible by {a}, else str(x)",
            f"return {word!r} if x % {a} == 0 else str(x)",
        ),
    )


@template("count_negative", 2)
def _count_negative(r: random.Random) -> Spec:
    neg = r.random() < 0.5
    word, op = ("negative", "<") if neg else ("positive", ">")
    return unary(
        r,
        f"count_{word}",
        int_list(-9, 9),
        "int",
        f"Return how many numbers of xs are {word} (0 is neither).",
        f"return sum(1 for x in xs if x {op} 0)",
    )


@template("is_palindrome", 2)
def _is_palindrome(r: random.Random) -> Spec:
    def make() -> str:
        w = r.choice(WORDS)[: r.randint(1, 4)]
        return w + w[::-1][r.randint(0, 1) :] if r.random() < 0.5 else w

    return Spec(
        r.choice(["is_palindrome", "reads_same_backwards"]),
        "s: str",
        "bool",
        "Return True if s reads the same forwards and backwards, ignoring case.",
        "t = s.lower()\nreturn t == t[::-1]",
        many(make),
    )


@template("dot_product", 2)
def _dot_product(r: random.Random) -> Spec:
    def make() -> tuple:
        n = r.randint(0, 5)
        return [r.randint(-5, 5) for _ in range(n)], [r.randint(-5, 5) for _ in range(n)]

    return Spec(
        r.choice(["dot", "dot_product"]),
        "xs: List[int], ys: List[int]",
        "int",
        "Return the sum of xs[i] * ys[i] over every i (xs and ys have the same length).",
        "return sum(x * y for x, y in zip(xs, ys))",
        distinct(make),
    )


@template("row_maxima", 2)
def _row_maxima(r: random.Random) -> Spec:
    return Spec(
        r.choice(["row_maxima", "max_of_each"]),
        "rows: List[List[int]]",
        "List[int]",
        "Return the largest number of each list in rows (no list is empty), in order.",
        "return [max(row) for row in rows]",
        many(lambda: [ints(r, n=(1, 4)) for _ in range(r.randint(0, 4))]),
    )
