"""Generate `services/agentserve/model_files/data/corpus.txt`, the BPE training text for the default model.

The text is original and templated: sentences about software, agents and tools built from word
lists, plus Python, JSON, shell and log snippets with numbers, so the byte-level BPE learns merges
for prose, code and digits alike. Output is a pure function of SEED (lists only, no set/dict
iteration that depends on hash randomisation), so rerunning this script reproduces the file byte
for byte:

    python scripts/make_corpus.py            # rewrites the shipped corpus
    python scripts/make_corpus.py --check    # exits 1 if the shipped corpus is stale
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SEED = 20240607
TARGET_BYTES = 280_000
OUT = Path(__file__).resolve().parents[1] / "services/agentserve/model_files/data/corpus.txt"

NOUNS = """
agent tool request response token cache scheduler router worker server client model prompt
message session queue buffer batch kernel tensor layer head block page pool node cluster replica
engine service endpoint handler thread process socket stream channel packet header payload
schema field record table index column row query result error exception warning timeout retry
budget limit quota policy rule plan task step goal action observation memory context window
document file folder path directory archive image container volume network port address host
user operator developer reviewer maintainer team project repository branch commit patch release
version build test suite fixture benchmark metric trace span log event alert dashboard report
function method class module package library interface protocol contract argument parameter
value variable constant string number integer float list array map dictionary tuple set graph
tree leaf root parent child sibling edge vertex weight bias gradient loss optimizer sample
vocabulary embedding attention projection activation norm matrix vector scalar shape dtype
device accelerator memory bandwidth latency throughput deadline priority fairness tenant prefix
suffix hash key lock mutex semaphore signal deadlock race condition invariant assertion check
migration rollout deployment config setting flag option default override secret credential
permission role account workspace notebook script command shell terminal editor compiler parser
lexer grammar syntax rule token stream decoder encoder sampler temperature logit probability
checkpoint snapshot backup restore journal ledger invoice order customer product catalog cart
weather forecast calendar meeting reminder email inbox draft summary note question answer
morning evening week month year minute second hour day night city river mountain garden kitchen
library museum station airport harbor bridge road village market school teacher student lesson
""".split()

VERBS = """
read write send receive parse render compile load store fetch evict schedule route dispatch
allocate free reserve release acquire retry cancel abort commit rollback merge split sort filter
map reduce encode decode sample generate predict rank score measure count track log trace
validate verify check inspect monitor restart deploy build install upgrade configure register
publish subscribe stream buffer flush sync copy move rename delete create update insert select
compute estimate compare search index summarize translate explain plan call invoke return yield
wait block poll notify handle raise catch ignore skip batch pad truncate normalize project rotate
cache reuse share transfer prefetch warm drain shard replicate balance throttle limit expand
""".split()

# General English, so the tokenizer is not only software jargon.
EVERYDAY_NOUNS = """
apple orange banana lemon bread butter cheese coffee tea sugar salt pepper onion garlic tomato
potato carrot rice soup salad sandwich breakfast lunch dinner recipe oven stove spoon fork knife
plate bowl cup bottle glass window door wall floor ceiling roof chair desk sofa lamp mirror carpet
pillow blanket shelf drawer closet basement attic balcony fence gate yard lawn tree flower grass
leaf branch forest meadow valley hill cliff cave island beach ocean lake pond stream waterfall
desert jungle glacier volcano canyon prairie storm rain snow wind cloud thunder lightning fog frost
sunrise sunset rainbow season spring summer autumn winter holiday birthday wedding festival party
concert theater movie song album painting sculpture poem novel story chapter sentence paragraph
word letter alphabet language grammar dictionary journal magazine newspaper article headline
author editor publisher reader writer poet artist musician singer dancer actor director painter
doctor nurse patient hospital clinic medicine pill fever cough headache injury bandage surgeon
lawyer judge court trial witness jury verdict law contract lease tenant landlord neighbor friend
family mother father sister brother daughter son uncle aunt cousin grandmother grandfather baby
child adult stranger guest host visitor traveler tourist pilot driver captain sailor farmer baker
butcher carpenter plumber electrician mechanic engineer scientist chemist physicist biologist
astronomer planet star moon comet galaxy telescope microscope laboratory experiment hypothesis
theory evidence discovery invention machine engine motor wheel gear lever pulley spring battery
wire cable plug switch button screen keyboard mouse printer camera microphone speaker headphone
phone tablet laptop computer robot drone satellite rocket airplane helicopter train subway bus
truck bicycle motorcycle boat ship ferry canoe ticket passport luggage suitcase backpack map
compass hotel hostel restaurant cafe bakery pharmacy bank office factory warehouse shop store
mall stadium gym pool park playground zoo farm barn stable field orchard vineyard harvest seed
soil fertilizer tractor cow horse sheep goat pig chicken duck goose rabbit fox wolf bear deer
lion tiger elephant giraffe zebra monkey whale dolphin shark octopus turtle frog snake lizard
eagle owl sparrow parrot butterfly bee ant spider mosquito beetle worm money coin wallet price
discount receipt salary tax loan debt profit revenue expense investment stock bond market economy
industry business company startup founder manager employee colleague meeting interview resume
career promotion vacation deadline schedule agenda minutes proposal strategy mission vision value
culture habit hobby sport game puzzle riddle joke secret promise dream idea thought feeling mood
emotion courage fear anger joy sorrow hope patience kindness honesty curiosity wisdom knowledge
skill talent effort practice progress success failure mistake lesson advice opinion argument
debate decision choice chance risk danger safety health energy strength balance harmony peace
freedom justice history future past present moment century decade era generation tradition
""".split()

EVERYDAY_VERBS = """
walk run jump climb swim fly drive ride sail travel visit arrive leave enter exit open close lock
unlock push pull lift carry drop throw kick hold grab touch shake wash clean cook bake boil fry
grill chop slice mix stir pour taste smell listen watch notice observe look seem appear remain
become grow shrink change improve repair break fix paint draw sing dance play learn teach study
remember forget believe doubt wonder imagine hope wish decide choose prefer accept refuse agree
disagree argue discuss mention describe introduce invite welcome greet thank apologize forgive
help support protect defend attack avoid prevent allow permit forbid require demand offer provide
deliver collect gather organize arrange prepare finish start begin continue stop pause resume
borrow lend buy sell pay spend save earn owe cost charge rent hire employ manage lead follow guide
""".split()

EVERYDAY_ADJECTIVES = """
happy sad angry calm brave shy proud humble kind rude polite honest clever wise foolish curious
gentle strong weak heavy light soft hard smooth rough sharp dull clean dirty wet dry hungry thirsty
tired sleepy awake alive dead rich poor young old new ancient bright quiet loud sweet sour bitter
salty spicy delicious fresh rotten green blue red yellow purple orange brown black white gray pink
golden silver wooden metal plastic glass round square flat tall thick thin famous strange normal
ordinary special rare common familiar foreign friendly lonely busy lazy early late beautiful ugly
pleasant terrible wonderful awful important useful useless helpful harmful dangerous safe simple
""".split()

IRREGULAR_PAST = {
    "write": "wrote",
    "send": "sent",
    "build": "built",
    "split": "split",
    "read": "read",
    "catch": "caught",
}
# Short verbs that double their final consonant before -ed/-ing (map -> mapped, mapping).
DOUBLING = ["map", "plan", "commit", "skip", "pad", "log", "drop", "stop"]

ADJECTIVES = """
fast slow small large tiny huge stale fresh cold warm hot idle busy local remote shared private
public internal external stable flaky noisy quiet careful simple complex robust fragile lazy eager
optional required invalid valid empty full partial complete pending running finished failed
healthy unhealthy secure unsafe cheap expensive concurrent sequential parallel deterministic
random ordered sorted unique duplicate recent ancient modern legacy primary secondary final
initial temporary permanent visible hidden short long narrow wide deep shallow bright dark
""".split()

ADVERBS = """
quickly slowly carefully eagerly lazily safely rarely often always never usually eventually
immediately gradually silently loudly correctly incorrectly twice again already still briefly
""".split()

CONNECTIVES = [
    "However",
    "Meanwhile",
    "In practice",
    "As a result",
    "For example",
    "In short",
    "By contrast",
    "Later",
    "Meanwhile",
    "Therefore",
    "On the other hand",
    "First",
    "Next",
    "Finally",
    "Sometimes",
    "In most cases",
    "Under load",
    "At start-up",
]

PREPOSITIONS = [
    "in",
    "on",
    "from",
    "into",
    "through",
    "behind",
    "before",
    "after",
    "with",
    "without",
    "under",
    "over",
    "across",
    "around",
    "between",
    "near",
    "inside",
]

NAMES = [
    "Ada",
    "Grace",
    "Linus",
    "Margaret",
    "Ken",
    "Barbara",
    "Dennis",
    "Frances",
    "Alan",
    "Radia",
    "Edsger",
    "Katherine",
    "Niklaus",
    "Sophie",
    "Tariq",
    "Mei",
    "Olu",
    "Priya",
    "Mateo",
    "Ingrid",
    "Kenji",
    "Amara",
    "Yusuf",
    "Elena",
    "Rohan",
    "Freya",
    "Diego",
]

UNICODE_LINES = [
    "Le café près de la gare ouvre à sept heures.",
    "Die Größe des Puffers beträgt zwölf Kilobyte.",
    "El niño leyó la canción en voz baja — muy despacio.",
    "Привет, агент! Запрос выполнен за 12 мс.",
    "東京の天気は晴れです。",
    "模型在缓存中找到了前缀。",
    "Status: ✓ passed, ✗ failed, → next step, … waiting.",
    "Temperature ≈ 0.7, latency ≤ 250 ms, cost ≥ €0.02 per call.",
    "naïve résumé coördinate façade jalapeño",
    "“Quoted text” and ‘single quotes’ are common in prose.",
    "Emoji appear in chat logs too: 🙂 🚀 🔧 📦",
]

TYPES = ["int", "str", "float", "bool", "list[int]", "dict[str, int]", "bytes", "None", "Path"]


def plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def third_person(verb: str) -> str:
    return plural(verb)


def past(verb: str) -> str:
    if verb in IRREGULAR_PAST:
        return IRREGULAR_PAST[verb]
    if verb in DOUBLING:
        return verb + verb[-1] + "ed"
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ied"
    return verb + "ed"


def gerund(verb: str) -> str:
    if verb in DOUBLING:
        return verb + verb[-1] + "ing"
    if verb.endswith("e") and not verb.endswith("ee"):
        return verb[:-1] + "ing"
    return verb + "ing"


def adverb(adjective: str) -> str:
    if adjective.endswith("y"):
        return adjective[:-1] + "ily"
    if adjective.endswith("le"):
        return adjective[:-1] + "y"
    return adjective + "ly"


def quality(adjective: str) -> str:
    """happy -> happiness, bright -> brightness."""
    return (adjective[:-1] + "i" if adjective.endswith("y") else adjective) + "ness"


def pascal(words: list[str]) -> str:
    return "".join(w.capitalize() for w in words)


def snake(words: list[str]) -> str:
    return "_".join(words)


class Writer:
    """Draws every piece of text from one seeded RNG so the corpus is reproducible."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def pick(self, items: list[str]) -> str:
        return self.rng.choice(items)

    def number(self) -> str:
        kind = self.rng.randrange(6)
        if kind == 0:
            return str(self.rng.randrange(2, 100))
        if kind == 1:
            return str(self.rng.randrange(100, 10_000))
        if kind == 2:
            return f"{self.rng.randrange(1, 10_000_000):,}"
        if kind == 3:
            return f"{self.rng.uniform(0, 100):.{self.rng.randrange(1, 4)}f}"
        if kind == 4:
            return str(2 ** self.rng.randrange(4, 21))
        return str(self.rng.randrange(1990, 2031))

    def identifier(self, parts: int) -> list[str]:
        return [self.pick(NOUNS if i else VERBS + ADJECTIVES) for i in range(parts)]

    def sentence(self) -> str:
        n1, n2, n3 = self.pick(NOUNS), self.pick(NOUNS), self.pick(NOUNS)
        v1, v2 = self.pick(VERBS), self.pick(VERBS)
        adj, adv, prep = self.pick(ADJECTIVES), self.pick(ADVERBS), self.pick(PREPOSITIONS)
        templates = [
            f"The {adj} {n1} {third_person(v1)} the {n2} before the {n3} {third_person(v2)}.",
            f"When an agent {third_person(v1)} a {n1}, the {n2} {adv} {third_person(v2)} its {plural(n3)}.",
            f"{self.pick(CONNECTIVES)}, the {n1} should {v1} every {n2} that {third_person(v2)} {prep} the {n3}.",
            f"We measured {self.number()} {plural(n1)} per second on a {adj} {n2}, about {self.number()}% "
            f"{self.pick(['faster', 'slower', 'better', 'worse'])} than the baseline.",
            f"If the {n1} fails, {self.pick(['it', 'the worker', 'the router', 'she', 'he', 'they'])} "
            f"{third_person(v1)} the {n2} and retries after {self.number()} milliseconds.",
            f"Why does the {n1} {v1} the {n2} when the {n3} is {adj}?",
            f"{self.pick(NAMES)} {past(v1)} the {adj} {n1} and {past(v2)} {self.number()} {plural(n2)} "
            f"{prep} the {n3}.",
            f"{gerund(v1).capitalize()} {plural(n1)} {adv} keeps the {n2} {adj} while the {n3} is {gerund(v2)}.",
            f"Each {n1} has {self.number()} {plural(n2)}, and each of them {third_person(v1)} at most one {n3}.",
            f"Do not {v1} the {n1} {prep} the {n2}; {v2} it {adv} instead.",
            f"The {n1} was {past(v1)} at {self.rng.randrange(24):02d}:{self.rng.randrange(60):02d} "
            f"and {past(v2)} {self.number()} seconds later.",
            f"It's {adj}, isn't it? The {n1} {third_person(v1)} what we'd expect, and they've {past(v2)} the {n2}.",
        ]
        return self.pick(templates)

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randrange(3, 8)))

    def story(self) -> str:
        """Everyday prose, so common English words get merges of their own."""
        lines = []
        for _ in range(self.rng.randrange(3, 7)):
            name, n1, n2, n3 = (
                self.pick(NAMES),
                self.pick(EVERYDAY_NOUNS),
                self.pick(EVERYDAY_NOUNS),
                self.pick(EVERYDAY_NOUNS),
            )
            v1, v2 = self.pick(EVERYDAY_VERBS), self.pick(EVERYDAY_VERBS)
            a1, a2 = self.pick(EVERYDAY_ADJECTIVES), self.pick(EVERYDAY_ADJECTIVES)
            lines.append(
                self.pick(
                    [
                        f"{name} {past(v1)} to the {n1} with a {a1} {n2}.",
                        f"The {plural(n1)} were {a1} and the {n2} smelled {a2}.",
                        f"After {gerund(v1)} the {n1}, {name} decided to {v2} the {a1} {n2}.",
                        f"{self.pick(CONNECTIVES)}, {self.pick(['my', 'our', 'their', 'her', 'his'])} {n1} "
                        f"{third_person(v1)} every {n2} near the {n3}.",
                        f'"{a1.capitalize()} {plural(n1)} never {v1} {plural(n2)}," said {name}.',
                        f"In {self.number()}, a {a1} {n1} {past(v2)} {self.rng.randrange(2, 40)} {plural(n2)} "
                        f"{self.pick(PREPOSITIONS)} the {n3}.",
                        f"Would you {v1} the {a1} {n1} or {v2} the {a2} {n2}?",
                        f"{name} {adverb(a1)} {past(v1)} the {n1} while the {n2} {adverb(a2)} {past(v2)}.",
                        f"The {quality(a1)} of the {n1} surprised everyone at the {n3}.",
                        f"{name}'s {n1} is {a1}er than the {n2}, but the {n3} is the most {a2} of all.",
                    ]
                )
            )
        return " ".join(lines)

    def heading(self) -> str:
        words = [self.pick(NOUNS + EVERYDAY_NOUNS) for _ in range(self.rng.randrange(1, 4))]
        title = " ".join(w.capitalize() for w in [self.pick(ADJECTIVES + EVERYDAY_ADJECTIVES)] + words)
        term = self.pick(NOUNS + EVERYDAY_NOUNS).capitalize()
        return (
            f"{'#' * self.rng.randrange(1, 4)} {title}\n\n"
            f"- **{term}**: {self.sentence()}\n- **{plural(term)}**: {self.sentence()}"
        )

    def dialogue(self) -> str:
        n1, n2, v1, v2 = self.pick(NOUNS), self.pick(NOUNS), self.pick(VERBS), self.pick(VERBS)
        path = "/".join(self.pick(NOUNS) for _ in range(self.rng.randrange(1, 4))) + ".py"
        return (
            f"User: Can you {v1} the {n1} in {path}?\n"
            f"Assistant: Sure. I will {v1} the {n1}, then {v2} the {n2} and report back.\n"
            f"Tool: {json.dumps({'status': 'ok', 'lines': self.rng.randrange(1, 900)})}\n"
            f"Assistant: Done. The {n1} now {third_person(v2)} {self.number()} {plural(n2)}."
        )

    def python(self) -> str:
        fn = snake(self.identifier(self.rng.randrange(2, 4)))
        cls = pascal(self.identifier(self.rng.randrange(2, 4)))
        args = [
            snake([self.pick(NOUNS)]) + "_" + str(i) if self.rng.random() < 0.1 else self.pick(NOUNS)
            for i in range(self.rng.randrange(1, 4))
        ]
        typed = ", ".join(f"{a}: {self.pick(TYPES)}" for a in args)
        ret, n1, v1 = self.pick(TYPES), self.pick(NOUNS), self.pick(VERBS)
        return "\n".join(
            [
                f"class {cls}:",
                f'    """{v1.capitalize()} {plural(n1)} for the {self.pick(NOUNS)}."""',
                "",
                f"    def {fn}(self, {typed}) -> {ret}:",
                f"        if not {args[0]}:",
                f'            raise ValueError(f"{args[0]} must not be empty, got {{{args[0]}!r}}")',
                f"        self._{n1}_count += {self.rng.randrange(1, 64)}",
                f"        for i in range(len({args[-1]})):",
                f"            self.{snake(self.identifier(2))}[i] = {args[0]} * {self.number().replace(',', '')}",
                f"        return self.{self.pick(VERBS)}_{n1}({', '.join(args)})",
            ]
        )

    def json_call(self) -> str:
        args: dict[str, object] = {}
        for _ in range(self.rng.randrange(1, 5)):
            parts = self.identifier(self.rng.randrange(1, 3))
            # JSON APIs mix snake_case and camelCase keys.
            key = snake(parts) if self.rng.random() < 0.6 else parts[0] + pascal(parts[1:])
            roll = self.rng.random()
            args[key] = (
                self.rng.randrange(0, 100_000)
                if roll < 0.3
                else round(self.rng.uniform(0, 1), 3)
                if roll < 0.45
                else self.rng.random() < 0.5
                if roll < 0.55
                else [self.pick(NOUNS) for _ in range(self.rng.randrange(1, 4))]
                if roll < 0.7
                else f"{self.pick(ADJECTIVES)} {self.pick(NOUNS)}"
            )
        call = {"name": snake(self.identifier(2)), "arguments": args, "id": f"call_{self.rng.getrandbits(48):012x}"}
        return json.dumps(call, indent=2 if self.rng.random() < 0.4 else None)

    def shell(self) -> str:
        noun, verb = self.pick(NOUNS), self.pick(VERBS)
        commands = [
            f'$ git commit -m "{verb.capitalize()} {noun} {self.pick(PREPOSITIONS)} {self.pick(NOUNS)}"',
            f"$ curl -s http://localhost:{self.rng.randrange(1024, 65536)}/v1/{plural(noun)} | jq '.{noun}'",
            f"$ ls -la /var/lib/{noun}/{self.pick(NOUNS)}-{self.rng.randrange(1, 99)}",
            f"$ pip install {noun}-{self.pick(NOUNS)}=={self.rng.randrange(0, 5)}.{self.rng.randrange(0, 30)}"
            f".{self.rng.randrange(0, 10)}",
            f"$ export {noun.upper()}_{self.pick(NOUNS).upper()}={self.number().replace(',', '')}",
            f"$ python -m pytest tests/{noun}/test_{verb}.py -k {self.pick(NOUNS)} -q",
            f'$ grep -rn "{verb}_{noun}" src/ | wc -l\n{self.rng.randrange(0, 500)}',
            f"$ docker run --rm -p {self.rng.randrange(1024, 9999)}:8080 {noun}/{self.pick(NOUNS)}:latest",
        ]
        return self.pick(commands)

    def log(self) -> str:
        level = self.pick(["INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"])
        return (
            f"2024-{self.rng.randrange(1, 13):02d}-{self.rng.randrange(1, 29):02d}T"
            f"{self.rng.randrange(24):02d}:{self.rng.randrange(60):02d}:{self.rng.randrange(60):02d}Z "
            f"{level} {self.pick(NOUNS)}.{self.pick(NOUNS)} {past(self.pick(VERBS))} "
            f"latency_ms={self.rng.uniform(0.1, 900):.1f} tokens={self.rng.randrange(1, 32768)} "
            f"id={self.rng.getrandbits(32):08x}"
        )

    def table(self) -> str:
        cols = [self.pick(NOUNS) for _ in range(3)]
        rows = [f"| {' | '.join(cols)} |", "|" + "---|" * 3]
        for _ in range(self.rng.randrange(2, 6)):
            rows.append(f"| {self.pick(ADJECTIVES)} | {self.number()} | {self.number()} |")
        return "\n".join(rows)

    def block(self) -> str:
        kinds = (
            [self.paragraph] * 6
            + [self.story] * 5
            + [self.heading] * 2
            + [self.dialogue] * 2
            + [self.python] * 3
            + [self.json_call] * 2
            + [self.shell] * 2
            + [self.log] * 2
            + [self.table]
        )
        if self.rng.random() < 0.03:
            return self.pick(UNICODE_LINES)
        return self.pick(kinds)()


def make_corpus(seed: int = SEED, target_bytes: int = TARGET_BYTES) -> str:
    writer = Writer(seed)
    blocks: list[str] = []
    size = 0
    while size < target_bytes:
        block = writer.block()
        blocks.append(block)
        size += len(block.encode()) + 2
    blocks.extend(UNICODE_LINES)  # every non-ASCII line at least once
    return "\n\n".join(blocks) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the shipped corpus differs")
    args = parser.parse_args(argv)
    text = make_corpus()
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print("corpus up to date" if same else f"{OUT} is stale; rerun scripts/make_corpus.py")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text.encode()):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
