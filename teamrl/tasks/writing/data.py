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

import functools
import random
import re
from collections.abc import Callable

from teamrl.errors import ConfigError
from teamrl.tasks.hub import LOCAL_COPY, load_dataset

TLDR_DATASET = "trl-lib/tldr"
ARXIV_DATASET = "OpenMLRL/arXiv_abstract"
# what a user whose hub data cannot be fetched (no network) can pass instead
HUB_INSTEAD = f"env.kwargs.source=offline for the builtin texts, or {LOCAL_COPY}"

# --------------------------------------------------------------------------------------
# Hub loaders
# --------------------------------------------------------------------------------------


def _load_rows(dataset_id: str, split: str, limit: int | None, required: tuple[str, ...]):
    """``datasets.load_dataset(dataset_id, split=split)``, column-checked, cut to ``limit``."""
    if limit is not None and limit < 1:
        raise ConfigError(f"env.kwargs.limit: expected a positive int or None, got {limit!r}")
    ds = load_dataset(dataset_id, split=split, dataset=dataset_id, instead=HUB_INSTEAD)
    missing = [c for c in required if c not in ds.column_names]
    if missing:
        raise ConfigError(
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
_SHARED_POOLS = {"NAMES": NAMES, "TOWNS": TOWNS, "DAYS": DAYS}

# One block per family: ``[name kind]``, then the slots in the order they are drawn, then the
# title and body templates. A slot line ``a, b = x / y | z / w`` draws one option with
# ``r.choice`` and unpacks its ``/``-separated parts; ``@POOL`` draws from a shared pool and
# ``~POOL`` takes ``r.sample(POOL, number of slots)``; a part written ``p ; q`` is itself drawn
# with ``r.choice`` while the options are built (before the outer draw). Indented lines
# continue the line above (joined by one space). The draw order fixes the texts for a seed:
# reorder nothing here without expecting different prompts.
_FAMILY_SPECS = """
[community_event news]
town = @TOWNS
event = food festival | book fair | charity run | robotics fair | night market | jazz night
weather = heavy rain | a heat wave | strong winds | an early frost
count = 1,200 | 3,500 | 800 | 5,000 | 2,300
highlight = a cooking contest judged by local schoolchildren
    | a stage built by volunteers from reclaimed wood
    | free workshops run by students from the college
    | a raffle that raised money for the public library
problem = parking ran out before noon | two food stalls ran out of stock early
    | the main road was closed for longer than planned | a power cut stopped the music for an hour
name = @NAMES
day = @DAYS
title = {town} {event} draws {count} visitors despite {weather}
body = The {event} in {town} went ahead on {day} and drew about {count} people,
    even though forecasters had warned of {weather}. Organiser {name} said the day was
    planned by a small team of volunteers over six months. The biggest crowd gathered
    for {highlight}. Not everything went smoothly: {problem}, and some visitors said
    they left early. {name} thanked local businesses for their support and said the
    team will meet next month to decide whether to hold the event again next year,
    possibly at a larger site.

[council_vote news]
town = @TOWNS
plan, cost = extend library opening hours / $40,000 a year
    | build a protected bike lane on the high street / $1.2 million
    | raise parking fees in the town centre / no extra cost
    | plant 2,000 trees along the river / $250,000
    | replace street lights with LED lamps / $600,000
yes = 5 | 6 | 7
no = 2 | 3 | 4
pro = it will save money in the long run | residents asked for it in last year's survey
    | it will make the area safer for children
con = the money is needed for road repairs | shop owners were not consulted
    | the timeline is too short
start = in the spring | next autumn | within three months | early next year
councillor = @NAMES
title = {town} council votes {yes}-{no} to {plan}
body = {town}'s town council has voted {yes} to {no} to {plan}, a plan expected to cost
    {cost}. Supporters argued that {pro}. Councillor {councillor}, who voted
    against, said {con} and asked for a public meeting before any work begins. Officials
    said the work will start {start} and that residents can comment on the details
    online until the end of the month. The council will review the results after one
    year and publish a short report.

[relationship_post post]
me = 21 | 24 | 27 | 30 | 34
other = 22 | 25 | 28 | 31 | 33
rel = girlfriend | boyfriend | partner | roommate | best friend
years = two years | eight months | three years | a year and a half
habit = cancel our plans at the last minute | spend every evening on their phone
    | borrow money and forget to pay it back | make jokes about my job in front of friends
tried = I mentioned it once over dinner, but it turned into an argument
    | I dropped a few hints, but nothing changed
    | I wrote down what I wanted to say but never said it
title = My {rel} ({other}) keeps doing something that bothers me. How do I bring it up?
body = I ({me}) have known my {rel} ({other}) for {years}, and most of the time things are
    great. Lately, though, they {habit}. It started small, but now it happens almost
    every week and I feel hurt each time. {tried}. I do not want to blow this out of
    proportion or end things over it. I just want them to understand how it makes me
    feel. Has anyone been in a similar situation, and what actually worked for you?

[work_post post]
role = junior developer | nurse | warehouse supervisor | teacher | designer
ask = work every weekend this month | train my replacement without a raise
    | cover for a colleague who keeps missing shifts
    | take on a second project with the same deadline
months = six months | a year | two years | four months
worry = I am worried that saying no will hurt my chances of promotion
    | I need the job, but I am close to burning out
    | my manager is usually fair, so this surprised me
title = Boss wants me to {ask}. Am I wrong to push back?
body = I have worked as a {role} at a mid-sized company for {months}. Yesterday my manager
    asked me to {ask}. There was no extra pay mentioned and no end date. {worry}. I
    already stay late twice a week and I have family plans I cannot move. A friend told
    me to put my concerns in writing, but another said that will look aggressive. How
    would you handle this conversation without damaging the relationship?

[science_news news]
lab = the University of Larkspur | the Eastvale Institute of Technology
    | a hospital research group in Redhill | the national marine laboratory
finding, detail = a cheap sensor that detects leaks in water pipes / costs less than five dollars
    | a new way to recycle old phone batteries / recovers most of the lithium
    | that short walks after meals lower blood sugar / needs only ten minutes
    | a drought-tolerant variety of wheat / uses a third less water
    | a method to forecast floods a day earlier / runs on a laptop
n = 40 | 120 | 300 | 65
lead = @NAMES
title = Researchers at {lab} report {finding}
body = A team at {lab} has reported {finding}. According to the study, the approach
    {detail}, which could make it practical outside the lab. The researchers tested it
    in {n} trials over two years. Lead author Dr {lead} said the results were
    encouraging but that larger studies are still needed. Other scientists welcomed the
    work, while noting that the trials were small. The team now plans to work with a
    local company to test the idea in real conditions.

[sports_report news]
home, away = ~TOWNS
sport, score = football / 2-1 ; 3-2 ; 1-0 | basketball / 78-74 ; 91-88 ; 102-99
    | hockey / 4-3 ; 3-2 ; 5-4 | rugby / 21-18 ; 24-20 ; 17-15
turn = a late goal from a teenage substitute | a comeback in the final ten minutes
    | a disputed call by the referee | a penalty saved in stoppage time
player = @NAMES
day = @DAYS
title = {home} beat {away} {score} in {sport} thriller
body = {home} beat {away} {score} on {day} in a tense {sport} match that was
    decided by {turn}. {away} had led for most of the game and looked comfortable at
    half time. The home crowd grew louder as {player} pushed the team forward. After the
    match, the {away} coach said his players were tired after three games in eight days.
    The win lifts {home} to second place in the league, two points behind the leaders,
    with four games left to play.

[neighbour_post post]
issue, short, effect, shrug = dog barks for hours every morning / barking dog / my sleep
    / buy earplugs
    | parties run past two in the morning / late parties / my sleep / buy earplugs
    | car blocks my driveway almost every day / parking / my commute / park on the street
    | security light shines into my bedroom / security light / my sleep / buy thicker curtains
since = March | the summer | they moved in | January
step = I left a polite note, which was ignored
    | I knocked on their door and they promised to fix it
    | I talked to the landlord, who said it is not his problem
title = My neighbour's {short} is wearing me down. What should I do next?
body = Since {since}, my neighbour's {issue}. I work early shifts, so it has started to
    affect {effect} and my mood. {step}. Nothing has changed in the last few weeks. I
    would rather not involve the police or the council because we have to live next to
    each other for years. My partner thinks I should just {shrug} and let it go.
    Is there a reasonable next step before making a formal complaint?

[business_news news]
town = @TOWNS
shop = bakery | bookshop | bike repair shop | coffee roastery | hardware store
years = 12 | 25 | 40 | 8
owner = @NAMES
change, reason, staff = will close its doors at the end of the month / rising rent
    / Its four employees have been offered help finding new jobs
    | is moving to a larger building on the main square / growing demand
    / The move will create three new jobs
    | will become a worker-owned cooperative / the owner's retirement
    / The six staff members will share ownership
    | is adding evening classes for beginners / requests from customers
    / Two staff members will teach the first classes
title = {town} {shop} {change}
body = A {shop} that has served {town} for {years} years {change}. Owner {owner} said the
    decision came down to {reason} and took months of planning. Regular customers
    described the shop as a meeting place as much as a business. {staff}. {owner} said
    the shop would hold a small celebration for customers next week and thanked the
    community for years of loyalty.

[pet_post post]
animal, name = rescue dog / Biscuit | cat / Pepper | parrot / Kiwi | puppy / Luna
when = three weeks ago | last month | two months ago
trouble, short = hides under the bed whenever someone visits / hides from visitors
    | will not eat unless I sit next to the bowl / will not eat alone
    | chews the door frame when I leave for work / chews the door frame
    | wakes the whole flat up at five every morning / wakes us at five
vet = The vet says there is nothing medically wrong
    | The shelter told me this is common in the first months
    | A trainer quoted me a price I cannot afford right now
title = Adopted a {animal} {when} and it {short}. Any advice?
body = I adopted {name}, a {animal}, {when}. I love having them around, but {name}
    {trouble}. I have tried a quieter routine, new toys and more time together, with mixed
    results. {vet}. I live alone, so I am learning as I go, and I feel a bit guilty that
    it is not going more smoothly. What helped your animal settle in, and how long did
    it take before things felt normal?

[transport_news news]
town = @TOWNS
change = a new night bus route to the hospital | free weekend trains for children under twelve
    | a ten percent rise in bus fares | the closure of the old ferry crossing
when = from next Monday | in June | after the summer holidays | next month
group, view = A local commuter group / the change is long overdue
    | Shop owners near the station / they fear fewer customers
    | Student union leaders / the timetable still ignores late lectures
title = {town} announces {change}
body = Transport officials in {town} have announced {change}, starting {when}. They said
    the decision followed a review of passenger numbers over the past two years and a
    public survey with more than two thousand replies. {group} said {view}. The
    transport office will publish the full timetable online next week and has promised
    to review the change after six months, depending on how many people use it.
"""


def _parse_family_specs(text: str) -> list[dict]:
    """``_FAMILY_SPECS`` as ``[{"name", "kind", "slots": [(names, source)], "title", "body"}]``;
    ``source`` is a pool name (``"@TOWNS"``/``"~TOWNS"``) or a tuple of options, each a tuple
    of parts, a part being a string or a tuple of strings still to draw from."""
    lines: list[str] = []
    for raw in text.strip().splitlines():
        if raw[:1].isspace():
            lines[-1] += " " + raw.strip()
        elif raw.strip():
            lines.append(raw)
    families: list[dict] = []
    for line in lines:
        if line.startswith("["):
            name, kind = line.strip("[]").split()
            families.append({"name": name, "kind": kind, "slots": []})
            continue
        key, value = (s.strip() for s in line.split("=", 1))
        if key in ("title", "body"):
            families[-1][key] = value
            continue
        source: str | tuple = value
        if value[0] not in "@~":
            source = tuple(
                tuple(
                    tuple(q.strip() for q in part.split(";")) if ";" in part else part.strip()
                    for part in option.split(" / ")
                )
                for option in value.split(" | ")
            )
        families[-1]["slots"].append((tuple(k.strip() for k in key.split(",")), source))
    return families


def _draw_family(spec: dict, r: random.Random) -> tuple[str, str, str]:
    """One ``(kind, title, body)``: the slots drawn from ``r`` in spec order, then the
    templates filled."""
    fields: dict[str, str] = {}
    for names, source in spec["slots"]:
        if isinstance(source, str) and source[0] == "~":
            values = r.sample(_SHARED_POOLS[source[1:]], len(names))
        elif isinstance(source, str):
            values = (r.choice(_SHARED_POOLS[source[1:]]),)
        else:  # nested parts are drawn while the options are built, as the outer draw sees them
            options = [
                tuple(r.choice(p) if isinstance(p, tuple) else p for p in option)
                for option in source
            ]
            values = r.choice(options)
        fields.update(zip(names, values, strict=True))
    return spec["kind"], spec["title"].format(**fields), spec["body"].format(**fields)


_FAMILIES: tuple[Callable[[random.Random], tuple[str, str, str]], ...] = tuple(
    functools.partial(_draw_family, spec) for spec in _parse_family_specs(_FAMILY_SPECS)
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
