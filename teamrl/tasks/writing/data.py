"""Data for the writing tasks: TLDR (Reddit posts) and arXiv (paper abstracts).

Every loader returns a list of plain dicts with at least ``{"id": str, "text": str}``;
``text`` is what the agents summarise or expand.

* ``load_tldr``: ``trl-lib/tldr`` (columns ``prompt``, ``completion``; the prompt reads
  "SUBREDDIT: r/... TITLE: ... POST: ... TL;DR:").
* ``load_arxiv``: ``OpenMLRL/arXiv_abstract`` (columns ``article_id``, ``abstract_text``,
  ``token_count``; ``abstract_text`` is a string or a list of sentences).
* ``offline_texts``: short posts and news items generated here from templates with a fixed
  seed, so the CPU quickstart runs with no download. Splits are disjoint.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

TLDR_DATASET = "trl-lib/tldr"
ARXIV_DATASET = "OpenMLRL/arXiv_abstract"

# --------------------------------------------------------------------------------------
# Hub loaders
# --------------------------------------------------------------------------------------


def _load_rows(dataset_id: str, split: str, limit: int | None, required: tuple[str, ...]):
    """``datasets.load_dataset(dataset_id, split=split)``, column-checked, cut to ``limit``."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit: expected a positive int or None, got {limit!r}")
    import datasets  # heavy: imported only when a loader runs

    ds = datasets.load_dataset(dataset_id, split=split)
    missing = [c for c in required if c not in ds.column_names]
    if missing:
        raise ValueError(
            f"{dataset_id} [{split}]: missing column(s) {missing}; columns are {ds.column_names}"
        )
    if limit is not None and limit < len(ds):
        ds = ds.select(range(limit))
    return ds


def _field_str(row: dict, name: str, index: int, source: str) -> str:
    value = row.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"{source} row {index}: field {name!r} must be a non-empty string, got {value!r:.80}"
        )
    return value


_TLDR_PARTS = re.compile(
    r"SUBREDDIT:\s*(?P<subreddit>.*?)\s*TITLE:\s*(?P<title>.*?)\s*POST:\s*(?P<post>.*)", re.S
)


def load_tldr(
    split: str = "train", limit: int | None = None, dataset_id: str = TLDR_DATASET
) -> list[dict]:
    """Rows of ``trl-lib/tldr`` as ``{"id", "text", "prompt", "reference", "subreddit",
    "title", "post"}``.

    ``text`` is the formatted post without the trailing "TL;DR:" cue (our prompts ask for the
    summary themselves); ``prompt`` is the raw upstream prompt and ``reference`` the human
    TL;DR. ``split`` accepts the ``datasets`` slicing syntax (``"test[:100]"``).
    """
    ds = _load_rows(dataset_id, split, limit, ("prompt", "completion"))
    rows = []
    for i, row in enumerate(ds):
        prompt = _field_str(row, "prompt", i, dataset_id)
        completion = row.get("completion")
        if not isinstance(completion, str):
            raise ValueError(
                f"{dataset_id} row {i}: field 'completion' must be a string, got {completion!r:.80}"
            )
        text = re.sub(r"\s*TL;DR:\s*$", "", prompt.strip())
        if not text:
            raise ValueError(f"{dataset_id} row {i}: field 'prompt' holds only the TL;DR cue")
        parts = _TLDR_PARTS.search(text)
        rows.append(
            {
                "id": f"tldr-{split}-{i}",
                "text": text,
                "prompt": prompt,
                "reference": completion.strip(),
                "subreddit": parts["subreddit"] if parts else "",
                "title": parts["title"] if parts else "",
                "post": parts["post"].strip() if parts else text,
            }
        )
    return rows


_SENTENCE_TAGS = re.compile(r"</?s>", re.I)


def load_arxiv(
    split: str = "train", limit: int | None = None, dataset_id: str = ARXIV_DATASET
) -> list[dict]:
    """Rows of ``OpenMLRL/arXiv_abstract`` as ``{"id", "text", "token_count"}``.

    ``abstract_text`` may be one string or a list of sentences (the processed format of the
    arXiv summarisation corpus); sentences are joined with spaces and ``<S>``/``</S>``
    sentence tags are dropped. The upstream splits are ``train`` and ``val``.
    """
    ds = _load_rows(dataset_id, split, limit, ("abstract_text",))
    rows = []
    for i, row in enumerate(ds):
        value = row.get("abstract_text")
        if isinstance(value, list) and all(isinstance(s, str) for s in value):
            value = " ".join(s.strip() for s in value)
        if not isinstance(value, str):
            raise ValueError(
                f"{dataset_id} row {i}: field 'abstract_text' must be a string or a list of "
                f"strings, got {value!r:.80}"
            )
        text = " ".join(_SENTENCE_TAGS.sub(" ", value).split())
        if not text:
            raise ValueError(f"{dataset_id} row {i}: field 'abstract_text' is empty")
        article_id = row.get("article_id")
        count = row.get("token_count")
        rows.append(
            {
                "id": str(article_id) if article_id not in (None, "") else f"arxiv-{split}-{i}",
                "text": text,
                "token_count": int(count) if isinstance(count, int) else len(text.split()),
            }
        )
    return rows


# --------------------------------------------------------------------------------------
# Offline prompt set: short posts and news items from templates
# --------------------------------------------------------------------------------------

OFFLINE_SIZES: dict[str, int] = {"train": 96, "eval": 24, "test": 24}
OFFLINE_SEED = 20250817

NAMES = (
    "Maya", "Daniel", "Priya", "Tom", "Aisha", "Lucas", "Hannah", "Omar", "Grace", "Mateo",
    "Lena", "Sam", "Chloe", "Ibrahim", "Nora", "Felix", "Rosa", "Ethan", "Yuki", "Ben",
)  # fmt: skip
TOWNS = (
    "Millbrook", "Harwick", "Eastvale", "Port Adley", "Cedar Falls", "Larkspur", "Westmere",
    "Brightwater", "Oakridge", "Fenton", "Stonebridge", "Redhill",
)  # fmt: skip
DAYS = ("Saturday", "Sunday", "Friday evening", "Tuesday night", "last weekend")


def _community_event(r: random.Random) -> tuple[str, str, str]:
    town, event = (
        r.choice(TOWNS),
        r.choice(
            (
                "food festival",
                "book fair",
                "charity run",
                "robotics fair",
                "night market",
                "jazz night",
            )
        ),
    )
    weather = r.choice(("heavy rain", "a heat wave", "strong winds", "an early frost"))
    count = r.choice(("1,200", "3,500", "800", "5,000", "2,300"))
    highlight = r.choice(
        (
            "a cooking contest judged by local schoolchildren",
            "a stage built by volunteers from reclaimed wood",
            "free workshops run by students from the college",
            "a raffle that raised money for the public library",
        )
    )
    problem = r.choice(
        (
            "parking ran out before noon",
            "two food stalls ran out of stock early",
            "the main road was closed for longer than planned",
            "a power cut stopped the music for an hour",
        )
    )
    name = r.choice(NAMES)
    title = f"{town} {event} draws {count} visitors despite {weather}"
    body = (
        f"The {event} in {town} went ahead on {r.choice(DAYS)} and drew about {count} people, "
        f"even though forecasters had warned of {weather}. Organiser {name} said the day was "
        f"planned by a small team of volunteers over six months. The biggest crowd gathered "
        f"for {highlight}. Not everything went smoothly: {problem}, and some visitors said "
        f"they left early. {name} thanked local businesses for their support and said the "
        f"team will meet next month to decide whether to hold the event again next year, "
        f"possibly at a larger site."
    )
    return "news", title, body


def _council_vote(r: random.Random) -> tuple[str, str, str]:
    town = r.choice(TOWNS)
    plan, cost = r.choice(
        (
            ("extend library opening hours", "$40,000 a year"),
            ("build a protected bike lane on the high street", "$1.2 million"),
            ("raise parking fees in the town centre", "no extra cost"),
            ("plant 2,000 trees along the river", "$250,000"),
            ("replace street lights with LED lamps", "$600,000"),
        )
    )
    yes = r.choice((5, 6, 7))
    no = r.choice((2, 3, 4))
    pro = r.choice(
        (
            "it will save money in the long run",
            "residents asked for it in last year's survey",
            "it will make the area safer for children",
        )
    )
    con = r.choice(
        (
            "the money is needed for road repairs",
            "shop owners were not consulted",
            "the timeline is too short",
        )
    )
    start = r.choice(("in the spring", "next autumn", "within three months", "early next year"))
    title = f"{town} council votes {yes}-{no} to {plan}"
    body = (
        f"{town}'s town council has voted {yes} to {no} to {plan}, a plan expected to cost "
        f"{cost}. Supporters argued that {pro}. Councillor {r.choice(NAMES)}, who voted "
        f"against, said {con} and asked for a public meeting before any work begins. Officials "
        f"said the work will start {start} and that residents can comment on the details "
        f"online until the end of the month. The council will review the results after one "
        f"year and publish a short report."
    )
    return "news", title, body


def _relationship_post(r: random.Random) -> tuple[str, str, str]:
    me, other = r.choice((21, 24, 27, 30, 34)), r.choice((22, 25, 28, 31, 33))
    rel = r.choice(("girlfriend", "boyfriend", "partner", "roommate", "best friend"))
    years = r.choice(("two years", "eight months", "three years", "a year and a half"))
    habit = r.choice(
        (
            "cancel our plans at the last minute",
            "spend every evening on their phone",
            "borrow money and forget to pay it back",
            "make jokes about my job in front of friends",
        )
    )
    tried = r.choice(
        (
            "I mentioned it once over dinner, but it turned into an argument",
            "I dropped a few hints, but nothing changed",
            "I wrote down what I wanted to say but never said it",
        )
    )
    title = f"My {rel} ({other}) keeps doing something that bothers me. How do I bring it up?"
    body = (
        f"I ({me}) have known my {rel} ({other}) for {years}, and most of the time things are "
        f"great. Lately, though, they {habit}. It started small, but now it happens almost "
        f"every week and I feel hurt each time. {tried}. I do not want to blow this out of "
        f"proportion or end things over it. I just want them to understand how it makes me "
        f"feel. Has anyone been in a similar situation, and what actually worked for you?"
    )
    return "post", title, body


def _work_post(r: random.Random) -> tuple[str, str, str]:
    role = r.choice(("junior developer", "nurse", "warehouse supervisor", "teacher", "designer"))
    ask = r.choice(
        (
            "work every weekend this month",
            "train my replacement without a raise",
            "cover for a colleague who keeps missing shifts",
            "take on a second project with the same deadline",
        )
    )
    months = r.choice(("six months", "a year", "two years", "four months"))
    worry = r.choice(
        (
            "I am worried that saying no will hurt my chances of promotion",
            "I need the job, but I am close to burning out",
            "my manager is usually fair, so this surprised me",
        )
    )
    title = f"Boss wants me to {ask}. Am I wrong to push back?"
    body = (
        f"I have worked as a {role} at a mid-sized company for {months}. Yesterday my manager "
        f"asked me to {ask}. There was no extra pay mentioned and no end date. {worry}. I "
        f"already stay late twice a week and I have family plans I cannot move. A friend told "
        f"me to put my concerns in writing, but another said that will look aggressive. How "
        f"would you handle this conversation without damaging the relationship?"
    )
    return "post", title, body


def _science_news(r: random.Random) -> tuple[str, str, str]:
    lab = r.choice(
        (
            "the University of Larkspur",
            "the Eastvale Institute of Technology",
            "a hospital research group in Redhill",
            "the national marine laboratory",
        )
    )
    finding, detail = r.choice(
        (
            ("a cheap sensor that detects leaks in water pipes", "costs less than five dollars"),
            ("a new way to recycle old phone batteries", "recovers most of the lithium"),
            ("that short walks after meals lower blood sugar", "needs only ten minutes"),
            ("a drought-tolerant variety of wheat", "uses a third less water"),
            ("a method to forecast floods a day earlier", "runs on a laptop"),
        )
    )
    n = r.choice(("40", "120", "300", "65"))
    lead = r.choice(NAMES)
    title = f"Researchers at {lab} report {finding}"
    body = (
        f"A team at {lab} has reported {finding}. According to the study, the approach "
        f"{detail}, which could make it practical outside the lab. The researchers tested it "
        f"in {n} trials over two years. Lead author Dr {lead} said the results were "
        f"encouraging but that larger studies are still needed. Other scientists welcomed the "
        f"work, while noting that the trials were small. The team now plans to work with a "
        f"local company to test the idea in real conditions."
    )
    return "news", title, body


def _sports_report(r: random.Random) -> tuple[str, str, str]:
    home, away = r.sample(TOWNS, 2)
    sport, score = r.choice(
        (
            ("football", r.choice(("2-1", "3-2", "1-0"))),
            ("basketball", r.choice(("78-74", "91-88", "102-99"))),
            ("hockey", r.choice(("4-3", "3-2", "5-4"))),
            ("rugby", r.choice(("21-18", "24-20", "17-15"))),
        )
    )
    turn = r.choice(
        (
            "a late goal from a teenage substitute",
            "a comeback in the final ten minutes",
            "a disputed call by the referee",
            "a penalty saved in stoppage time",
        )
    )
    player = r.choice(NAMES)
    title = f"{home} beat {away} {score} in {sport} thriller"
    body = (
        f"{home} beat {away} {score} on {r.choice(DAYS)} in a tense {sport} match that was "
        f"decided by {turn}. {away} had led for most of the game and looked comfortable at "
        f"half time. The home crowd grew louder as {player} pushed the team forward. After the "
        f"match, the {away} coach said his players were tired after three games in eight days. "
        f"The win lifts {home} to second place in the league, two points behind the leaders, "
        f"with four games left to play."
    )
    return "news", title, body


def _neighbour_post(r: random.Random) -> tuple[str, str, str]:
    issue, short, effect, shrug = r.choice(
        (
            ("dog barks for hours every morning", "barking dog", "my sleep", "buy earplugs"),
            ("parties run past two in the morning", "late parties", "my sleep", "buy earplugs"),
            (
                "car blocks my driveway almost every day",
                "parking",
                "my commute",
                "park on the street",
            ),
            (
                "security light shines into my bedroom",
                "security light",
                "my sleep",
                "buy thicker curtains",
            ),
        )
    )
    since = r.choice(("March", "the summer", "they moved in", "January"))
    step = r.choice(
        (
            "I left a polite note, which was ignored",
            "I knocked on their door and they promised to fix it",
            "I talked to the landlord, who said it is not his problem",
        )
    )
    title = f"My neighbour's {short} is wearing me down. What should I do next?"
    body = (
        f"Since {since}, my neighbour's {issue}. I work early shifts, so it has started to "
        f"affect {effect} and my mood. {step}. Nothing has changed in the last few weeks. I "
        f"would rather not involve the police or the council because we have to live next to "
        f"each other for years. My partner thinks I should just {shrug} and let it go. "
        f"Is there a reasonable next step before making a formal complaint?"
    )
    return "post", title, body


def _business_news(r: random.Random) -> tuple[str, str, str]:
    town = r.choice(TOWNS)
    shop = r.choice(("bakery", "bookshop", "bike repair shop", "coffee roastery", "hardware store"))
    years = r.choice(("12", "25", "40", "8"))
    owner = r.choice(NAMES)
    change, reason, staff = r.choice(
        (
            (
                "will close its doors at the end of the month",
                "rising rent",
                "Its four employees have been offered help finding new jobs",
            ),
            (
                "is moving to a larger building on the main square",
                "growing demand",
                "The move will create three new jobs",
            ),
            (
                "will become a worker-owned cooperative",
                "the owner's retirement",
                "The six staff members will share ownership",
            ),
            (
                "is adding evening classes for beginners",
                "requests from customers",
                "Two staff members will teach the first classes",
            ),
        )
    )
    title = f"{town} {shop} {change}"
    body = (
        f"A {shop} that has served {town} for {years} years {change}. Owner {owner} said the "
        f"decision came down to {reason} and took months of planning. Regular customers "
        f"described the shop as a meeting place as much as a business. {staff}. {owner} said "
        f"the shop would hold a small celebration for customers next week and thanked the "
        f"community for years of loyalty."
    )
    return "news", title, body


def _pet_post(r: random.Random) -> tuple[str, str, str]:
    animal, name = r.choice(
        (("rescue dog", "Biscuit"), ("cat", "Pepper"), ("parrot", "Kiwi"), ("puppy", "Luna"))
    )
    when = r.choice(("three weeks ago", "last month", "two months ago"))
    trouble, short = r.choice(
        (
            ("hides under the bed whenever someone visits", "hides from visitors"),
            ("will not eat unless I sit next to the bowl", "will not eat alone"),
            ("chews the door frame when I leave for work", "chews the door frame"),
            ("wakes the whole flat up at five every morning", "wakes us at five"),
        )
    )
    vet = r.choice(
        (
            "The vet says there is nothing medically wrong",
            "The shelter told me this is common in the first months",
            "A trainer quoted me a price I cannot afford right now",
        )
    )
    title = f"Adopted a {animal} {when} and it {short}. Any advice?"
    body = (
        f"I adopted {name}, a {animal}, {when}. I love having them around, but {name} "
        f"{trouble}. I have tried a quieter routine, new toys and more time together, with mixed "
        f"results. {vet}. I live alone, so I am learning as I go, and I feel a bit guilty that "
        f"it is not going more smoothly. What helped your animal settle in, and how long did "
        f"it take before things felt normal?"
    )
    return "post", title, body


def _transport_news(r: random.Random) -> tuple[str, str, str]:
    town = r.choice(TOWNS)
    change = r.choice(
        (
            "a new night bus route to the hospital",
            "free weekend trains for children under twelve",
            "a ten percent rise in bus fares",
            "the closure of the old ferry crossing",
        )
    )
    when = r.choice(("from next Monday", "in June", "after the summer holidays", "next month"))
    group, view = r.choice(
        (
            ("A local commuter group", "the change is long overdue"),
            ("Shop owners near the station", "they fear fewer customers"),
            ("Student union leaders", "the timetable still ignores late lectures"),
        )
    )
    title = f"{town} announces {change}"
    body = (
        f"Transport officials in {town} have announced {change}, starting {when}. They said "
        f"the decision followed a review of passenger numbers over the past two years and a "
        f"public survey with more than two thousand replies. {group} said {view}. The "
        f"transport office will publish the full timetable online next week and has promised "
        f"to review the change after six months, depending on how many people use it."
    )
    return "news", title, body


_FAMILIES: tuple[Callable[[random.Random], tuple[str, str, str]], ...] = (
    _community_event,
    _council_vote,
    _relationship_post,
    _work_post,
    _science_news,
    _sports_report,
    _neighbour_post,
    _business_news,
    _pet_post,
    _transport_news,
)


def _offline_pool(seed: int = OFFLINE_SEED) -> list[dict]:
    """All offline rows, unique by text, families interleaved; split order is fixed."""
    rng = random.Random(seed)
    total = sum(OFFLINE_SIZES.values())
    seen: set[str] = set()
    pool: list[dict] = []
    attempts = 0
    while len(pool) < total:
        attempts += 1
        if attempts > 50 * total:  # the slot pools are far larger; this guards a bad edit
            raise RuntimeError(f"offline texts: only {len(pool)} unique texts of {total}")
        family = _FAMILIES[len(pool) % len(_FAMILIES)]
        kind, title, body = family(rng)
        text = f"{title}\n\n{body}"
        if text in seen:
            continue
        seen.add(text)
        pool.append({"text": text, "title": title, "body": body, "kind": kind})
    return pool


def offline_texts(split: str = "train", seed: int = OFFLINE_SEED) -> list[dict]:
    """Offline rows ``{"id", "text", "title", "body", "kind"}`` of ``split`` (train, eval
    or test; 96/24/24 rows). Deterministic for a seed; the splits never share a text."""
    if split not in OFFLINE_SIZES:
        raise ValueError(f"offline split: expected one of {list(OFFLINE_SIZES)}, got {split!r}")
    names = list(OFFLINE_SIZES)
    start = sum(OFFLINE_SIZES[n] for n in names[: names.index(split)])
    rows = _offline_pool(seed)[start : start + OFFLINE_SIZES[split]]
    return [{"id": f"offline-{split}-{i:03d}", **row} for i, row in enumerate(rows)]
