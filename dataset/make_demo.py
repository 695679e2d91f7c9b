"""Generate the bundled demo data in dataset/demo/.

The demo data lets a newcomer run the whole MiniMind chain (pretrain -> SFT -> reasoning distill ->
GRPO, plus LoRA, DPO and distillation) on a CPU in minutes with a tiny model (hidden size 64, 2 layers,
~128-token samples). So it is templated and repetitive, with a small closed set of patterns, in Chinese
and English:

- single-digit additions and subtractions ("3+5=?" -> "8"), the one task family shared by the reasoning
  data and the RL prompts, so that the GRPO rule reward (correct <answer>, right format) can rise;
- simple facts (capitals, colours, animal sounds, opposites, counting);
- MiniMind's identity ("who are you" -> "I am MiniMind ...").

Output is deterministic (fixed seed, stdlib only): running this script reproduces the committed files
byte for byte. Usage: `python dataset/make_demo.py [--out DIR]`.
"""
import argparse
import json
import os
import random

SEED = 1234
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo")

# Lines per file: one pretrain epoch of a 64x2 model on a CPU stays around a minute.
SIZES = {"pretrain": 3000, "sft": 3000, "lora_identity": 400, "dpo": 1000, "reason": 2000, "rlaif": 1000}

# ---------------------------------------------------------------------------------------------------
# Facts: (English subject, Chinese subject, English value, Chinese value)

CAPITALS = [
    ("China", "中国", "Beijing", "北京"), ("France", "法国", "Paris", "巴黎"),
    ("Japan", "日本", "Tokyo", "东京"), ("the UK", "英国", "London", "伦敦"),
    ("Germany", "德国", "Berlin", "柏林"), ("Italy", "意大利", "Rome", "罗马"),
    ("Russia", "俄罗斯", "Moscow", "莫斯科"), ("Egypt", "埃及", "Cairo", "开罗"),
    ("Canada", "加拿大", "Ottawa", "渥太华"), ("Spain", "西班牙", "Madrid", "马德里"),
]
COLOURS = [
    ("the sky", "天空", "blue", "蓝色"), ("grass", "草", "green", "绿色"),
    ("snow", "雪", "white", "白色"), ("a banana", "香蕉", "yellow", "黄色"),
    ("blood", "血", "red", "红色"), ("coal", "煤", "black", "黑色"),
    ("an orange", "橙子", "orange", "橙色"),
]
ANIMALS = [
    ("cat", "猫", "meow", "喵喵"), ("dog", "狗", "woof", "汪汪"), ("cow", "牛", "moo", "哞哞"),
    ("duck", "鸭子", "quack", "嘎嘎"), ("sheep", "羊", "baa", "咩咩"),
]
OPPOSITES = [
    ("big", "大", "small", "小"), ("hot", "热", "cold", "冷"), ("up", "上", "down", "下"),
    ("day", "白天", "night", "黑夜"), ("fast", "快", "slow", "慢"), ("left", "左", "right", "右"),
    ("old", "老", "young", "年轻"), ("open", "开", "closed", "关"),
]

IDENTITY_EN = [
    "I am MiniMind, a small language model trained from scratch.",
    "I am MiniMind, a tiny AI assistant. I can answer simple questions.",
    "My name is MiniMind. I am a small language model that can do simple math and answer simple questions.",
]
IDENTITY_ZH = [
    "我是MiniMind，一个从零开始训练的小型语言模型。",
    "我是MiniMind，一个小小的人工智能助手，可以回答简单的问题。",
    "我叫MiniMind，是一个小型语言模型，会做简单的算术，也能回答简单的问题。",
]
# Third-person statements for the pretraining text.
ABOUT_EN = ["MiniMind is a small language model.", "MiniMind was trained from scratch.",
            "MiniMind can answer simple questions.", "MiniMind can do simple math."]
ABOUT_ZH = ["MiniMind是一个小型语言模型。", "MiniMind是从零开始训练的。",
            "MiniMind可以回答简单的问题。", "MiniMind会做简单的算术。"]
WHO_EN = ["Who are you?", "What is your name?", "Introduce yourself.", "Tell me about yourself.",
          "What are you?", "Are you ChatGPT?", "Who made you?", "What can you do?"]
WHO_ZH = ["你是谁？", "你叫什么名字？", "介绍一下你自己。", "请做个自我介绍。", "你是什么？",
          "你是ChatGPT吗？", "谁训练了你？", "你能做什么？"]
WRONG_IDENTITY_EN = ["I am ChatGPT, made by OpenAI.", "I am a human.", "I do not know who I am."]
WRONG_IDENTITY_ZH = ["我是ChatGPT，由OpenAI开发。", "我是一个人类。", "我不知道我是谁。"]

GREETINGS = [
    ("Hello!", "Hello! I am MiniMind. How can I help you?"),
    ("Hi!", "Hi! Ask me a simple question."),
    ("Good morning!", "Good morning! Have a nice day."),
    ("Thank you!", "You are welcome!"),
    ("Goodbye!", "Goodbye! See you next time."),
    ("你好！", "你好！我是MiniMind，有什么可以帮你的吗？"),
    ("嗨！", "嗨！你可以问我一个简单的问题。"),
    ("早上好！", "早上好！祝你今天愉快。"),
    ("谢谢你！", "不客气！"),
    ("再见！", "再见！下次见。"),
]
SYSTEM_PROMPTS = [
    "You are MiniMind, a helpful assistant.",
    "You are a small assistant. Answer briefly.",
    "你是MiniMind，一个乐于助人的助手。",
    "你是一个小助手，请简短回答。",
]

# ---------------------------------------------------------------------------------------------------
# Arithmetic: single-digit additions (0..9 + 0..9) and subtractions with a non-negative result.

ARITHMETIC = [(a, "+", b, a + b) for a in range(10) for b in range(10)] + \
             [(a, "-", b, a - b) for a in range(10) for b in range(a + 1)]


def arith_question(rng, a, op, b, lang):
    """A user question about `a op b`, in one of a few fixed phrasings."""
    if lang == "en":
        word = "plus" if op == "+" else "minus"
        return rng.choice([f"{a}{op}{b}=?", f"What is {a}{op}{b}?", f"What is {a} {word} {b}?"])
    word = "加" if op == "+" else "减"
    return rng.choice([f"{a}{op}{b}=?", f"{a}{op}{b}等于几？", f"{a}{word}{b}等于多少？"])


def arith_thought(a, op, b, c, lang):
    """The short reasoning line of the reasoning data, e.g. "3+5: 3 plus 5 is 8"."""
    if lang == "en":
        return f"{a}{op}{b}: {a} {'plus' if op == '+' else 'minus'} {b} is {c}"
    return f"{a}{op}{b}：{a}{'加' if op == '+' else '减'}{b}等于{c}"


def reasoning_reply(thought, answer):
    """The exact reasoning-reply format the GRPO format reward checks."""
    return f"<think>\n{thought}\n</think>\n<answer>\n{answer}\n</answer>"


# ---------------------------------------------------------------------------------------------------
# Sentences for pretraining and question/answer pairs for chat data.

#: The closed fact set by kind: (table of (subject en, subject zh, value en, value zh) or None for
#: counting, English question, English sentence, Chinese question, Chinese sentence); {s} is the
#: subject and {v} the value.
FACTS = {
    "capital": (CAPITALS, "What is the capital of {s}?", "The capital of {s} is {v}.",
                "{s}的首都是哪里？", "{s}的首都是{v}。"),
    "colour": (COLOURS, "What colour is {s}?", "The colour of {s} is {v}.", "{s}是什么颜色的？", "{s}是{v}的。"),
    "animal": (ANIMALS, "What does a {s} say?", "A {s} says {v}.", "{s}怎么叫？", "{s}的叫声是{v}。"),
    "opposite": (OPPOSITES, "What is the opposite of {s}?", "The opposite of {s} is {v}.",
                 "{s}的反义词是什么？", "{s}的反义词是{v}。"),
    "count": (None, "What number comes after {s}?", "After {s} comes {v}.", "{s}的后面是几？", "{s}的后面是{v}。"),
}


def fact_sentence(rng, lang):
    """One plain-text sentence stating a fact of the closed fact set."""
    kind = rng.choice(["add", "add", "sub", "capital", "colour", "animal", "opposite", "count", "identity"])
    if kind in ("add", "sub"):
        a, op, b, c = rng.choice([x for x in ARITHMETIC if (x[1] == "+") == (kind == "add")])
        if lang == "en":
            return f"{arith_thought(a, op, b, c, 'en')}. So {a}{op}{b}={c}."
        return f"{arith_thought(a, op, b, c, 'zh')}。所以{a}{op}{b}={c}。"
    if kind in FACTS:
        return fact(rng, kind, lang)[1]
    return rng.choice(ABOUT_EN if lang == "en" else ABOUT_ZH)


def fact_qa(rng, lang, kind=None):
    """One (question, answer, short answer) of the fact set; the short answer is checkable."""
    return fact(rng, kind or rng.choice(list(FACTS)), lang)


def fact(rng, kind, lang):
    """(question, sentence, short answer) of one fact of `kind` (a key of FACTS; any other: "count")."""
    table, *templates = FACTS.get(kind, FACTS["count"])
    if table is None:  # counting: the subject is a number below 19, the answer the next one
        n = rng.randrange(0, 19)
        s_en, s_zh, v_en, v_zh = n, n, n + 1, n + 1
    else:
        s_en, s_zh, v_en, v_zh = rng.choice(table)
    question, sentence = templates[:2] if lang == "en" else templates[2:]
    s, v = (s_en, v_en) if lang == "en" else (s_zh, v_zh)
    return question.format(s=s, v=v), sentence.format(s=s, v=v), str(v)


def arith_qa(rng, lang):
    """One arithmetic (question, answer sentence, short answer, thought)."""
    a, op, b, c = rng.choice(ARITHMETIC)
    return arith_question(rng, a, op, b, lang), f"{a}{op}{b}={c}", str(c), arith_thought(a, op, b, c, lang)


def chat_pair(rng, lang):
    """One SFT (question, answer) drawn from every category, arithmetic the most."""
    kind = rng.choices(["arith", "fact", "identity", "greeting"], weights=[45, 35, 10, 10])[0]
    if kind == "arith":
        q, a, _, _ = arith_qa(rng, lang)
        return q, a
    if kind == "fact":
        q, a, _ = fact_qa(rng, lang)
        return q, a
    if kind == "identity":
        return (rng.choice(WHO_EN), rng.choice(IDENTITY_EN)) if lang == "en" else \
            (rng.choice(WHO_ZH), rng.choice(IDENTITY_ZH))
    greetings = [g for g in GREETINGS if (g[0].isascii()) == (lang == "en")]
    return rng.choice(greetings)


def lang_of(rng):
    return rng.choice(["en", "zh"])


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


# ---------------------------------------------------------------------------------------------------
# One generator per file; each yields the JSON objects of its lines.

def gen_pretrain(rng, n):
    for _ in range(n):
        lang = lang_of(rng)
        sep = " " if lang == "en" else ""
        yield {"text": sep.join(fact_sentence(rng, lang) for _ in range(rng.randint(4, 8)))}


def gen_sft(rng, n):
    for _ in range(n):
        lang = lang_of(rng)
        messages = []
        if rng.random() < 0.15:
            messages.append({"role": "system", "content": rng.choice(
                [s for s in SYSTEM_PROMPTS if s.isascii() == (lang == "en")])})
        for _ in range(2 if rng.random() < 0.2 else 1):
            q, a = chat_pair(rng, lang)
            messages += [user(q), assistant(a)]
        yield {"conversations": messages}


def gen_lora_identity(rng, n):
    for _ in range(n):
        lang = lang_of(rng)
        if lang == "en":
            yield {"conversations": [user(rng.choice(WHO_EN)), assistant(rng.choice(IDENTITY_EN))]}
        else:
            yield {"conversations": [user(rng.choice(WHO_ZH)), assistant(rng.choice(IDENTITY_ZH))]}


def gen_dpo(rng, n):
    for _ in range(n):
        lang = lang_of(rng)
        kind = rng.choices(["arith", "fact", "identity"], weights=[50, 35, 15])[0]
        if kind == "arith":
            a, op, b, c = rng.choice(ARITHMETIC)
            q = arith_question(rng, a, op, b, lang)
            wrong = c + rng.choice([-2, -1, 1, 2]) if c >= 2 else c + rng.choice([1, 2])
            good, bad = f"{a}{op}{b}={c}", f"{a}{op}{b}={wrong}"
        elif kind == "fact":
            q, good, short = fact_qa(rng, lang)
            _, other, other_short = fact_qa(rng, lang)
            # A fluent but wrong (or off-topic) answer: the preferred one is the true fact.
            bad = other if other_short != short else ("I do not know." if lang == "en" else "我不知道。")
        else:
            q = rng.choice(WHO_EN if lang == "en" else WHO_ZH)
            good = rng.choice(IDENTITY_EN if lang == "en" else IDENTITY_ZH)
            bad = rng.choice(WRONG_IDENTITY_EN if lang == "en" else WRONG_IDENTITY_ZH)
        yield {"chosen": [user(q), assistant(good)], "rejected": [user(q), assistant(bad)]}


def gen_reason(rng, n):
    for _ in range(n):
        lang = lang_of(rng)
        if rng.random() < 0.85:
            q, _, short, thought = arith_qa(rng, lang)
        else:
            q, sentence, short = fact_qa(rng, lang)
            thought = sentence.rstrip(".。")
        yield {"conversations": [user(q), assistant(reasoning_reply(thought, short))]}


def gen_rlaif(rng, n):
    for _ in range(n):
        q, _, short, _ = arith_qa(rng, lang_of(rng))
        yield {"conversations": [user(q), assistant(short)]}


GENERATORS = {"pretrain": gen_pretrain, "sft": gen_sft, "lora_identity": gen_lora_identity,
              "dpo": gen_dpo, "reason": gen_reason, "rlaif": gen_rlaif}


def write_demo(out_dir=DEFAULT_OUT, seed=SEED):
    """Write every demo file into `out_dir`; returns {name: path}. Each file has its own seeded RNG,
    so changing one generator leaves the other files unchanged."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for i, (name, gen) in enumerate(GENERATORS.items()):
        rng = random.Random(seed * 100 + i)
        path = os.path.join(out_dir, f"{name}.jsonl")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            for obj in gen(rng, SIZES[name]):
                f.write(json.dumps(obj, ensure_ascii=False) + "\n")
        paths[name] = path
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description="Generate the bundled MiniMind demo data")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output folder (default: dataset/demo next to this script)")
    parser.add_argument("--seed", type=int, default=SEED, help="random seed (the committed files use the default)")
    args = parser.parse_args(argv)
    for name, path in write_demo(args.out, args.seed).items():
        print(f"{name:14s} {SIZES[name]:5d} lines  {os.path.getsize(path) / 1024:7.1f} KiB  {path}")


if __name__ == "__main__":
    main()
