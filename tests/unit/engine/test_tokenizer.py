from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agentserve.model_files.tokenizer import Tokenizer

pytestmark = pytest.mark.unit

TEXTS = [
    "Hello world, the agent calls a tool.",
    "  leading and trailing spaces  \n\n\tand tabs\n",
    'def f(x: int) -> int:\n    return {"a": [1, 2.5, -3e4]}["a"][0]  # 100%',
    "café naïve résumé — “quotes” → ✓ 東京の天気 模型 Привет 🙂🚀",
    "mixed <|im_start|>user\nhi<|im_end|>\n",
    "",
]

CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "List files in /tmp"},
    {"role": "assistant", "content": "a.txt\nb.txt"},
]
CHAT_RENDERED = (
    "<|im_start|>system\nYou are terse.<|im_end|>\n"
    "<|im_start|>user\nList files in /tmp<|im_end|>\n"
    "<|im_start|>assistant\na.txt\nb.txt<|im_end|>\n"
)

# A Llama-3-shaped template: BOS from a variable, header tokens, raise_exception on unknown roles.
LLAMA_STYLE_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unsupported role ' + message['role']) }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '<|im_end|>\n\n' + message['content'] | trim + eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_end|>\n\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Tokenizer:
    return Tokenizer.from_dir(tiny_model_dir)


@pytest.fixture(scope="module")
def hf_tok(tiny_model_dir: Path):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(tiny_model_dir)


def copy_model(src: Path, dst: Path, **config_changes) -> Path:
    """Tokenizer files of `src` in `dst`, with tokenizer_config.json keys replaced (None deletes)."""
    dst.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "config.json"):
        shutil.copy(src / name, dst / name)
    config = json.loads((dst / "tokenizer_config.json").read_text())
    for key, value in config_changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (dst / "tokenizer_config.json").write_text(json.dumps(config))
    return dst


def test_vocab_and_special_ids(tok):
    assert tok.vocab_size == 8192
    assert tok.bos_token_id == 0
    assert tok.eos_token_ids == (1, 4)
    assert [tok.token_to_id(t) for t in ("<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>")] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert tok.token_to_id("not-a-token-at-all") is None


@pytest.mark.parametrize("text", TEXTS)
def test_decode_inverts_encode(tok, text):
    assert tok.decode(tok.encode(text), skip_special_tokens=False) == text


def test_exact_ids_and_bos(tok):
    assert tok.encode("the agent calls a tool") == [88, 262, 542, 2876, 269, 1318]
    assert tok.encode("the agent calls a tool", add_bos=True) == [0, 88, 262, 542, 2876, 269, 1318]
    assert tok.encode("<|im_start|>user<|im_end|>") == [3, 5059, 4]


def test_decode_skips_special_tokens_by_default(tok):
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>", add_bos=True)
    assert tok.decode(ids) == "user\nhi"
    assert tok.decode(ids, skip_special_tokens=False) == "<|bos|><|im_start|>user\nhi<|im_end|>"


def test_ids_past_the_tokenizer_vocab_decode_to_nothing(tok):
    hello = tok.encode("hello")
    assert tok.decode([*hello, 8191 + 1000]) == "hello"


def test_chat_template_renders_chatml(tok):
    assert tok.apply_chat_template(CHAT, add_generation_prompt=False) == CHAT_RENDERED
    assert tok.apply_chat_template(CHAT) == CHAT_RENDERED + "<|im_start|>assistant\n"
    assert tok.apply_chat_template([]) == "<|im_start|>assistant\n"


def test_chat_messages_are_validated(tok):
    with pytest.raises(ValueError, match=r"messages\[1\] needs a non-empty string 'role'"):
        tok.apply_chat_template([{"role": "user", "content": "a"}, {"content": "b"}])
    with pytest.raises(ValueError, match=r"messages\[0\] \(user\) has no 'content'"):
        tok.apply_chat_template([{"role": "user"}])
    with pytest.raises(ValueError, match=r"messages\[0\] must be a dict, got str"):
        tok.apply_chat_template(["hello"])
    with pytest.raises(ValueError, match="messages must be a list"):
        tok.apply_chat_template("hello")
    with pytest.raises(ValueError, match="chat template rejected the messages: message content must be a string"):
        tok.apply_chat_template([{"role": "user", "content": None}])


@pytest.mark.parametrize("text", TEXTS)
def test_encode_decode_match_transformers(tok, hf_tok, text):
    ids = tok.encode(text)
    assert hf_tok(text)["input_ids"] == ids
    assert hf_tok.decode(ids) == tok.decode(ids, skip_special_tokens=False)  # HF keeps specials by default
    assert hf_tok.decode(ids, skip_special_tokens=True) == tok.decode(ids)


def test_chat_template_matches_transformers(tok, hf_tok):
    for add_prompt in (True, False):
        ours = tok.apply_chat_template(CHAT, add_generation_prompt=add_prompt)
        assert hf_tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=add_prompt) == ours


def test_llama_style_config_with_dict_bos_and_several_eos_sources(tiny_model_dir, tmp_path):
    folder = copy_model(
        tiny_model_dir,
        tmp_path / "llama",
        bos_token={"__type": "AddedToken", "content": "<|bos|>", "lstrip": False},
        eos_token="<|im_end|>",
        chat_template=LLAMA_STYLE_TEMPLATE,
    )
    tok = Tokenizer.from_dir(folder)
    assert tok.bos_token_id == 0
    assert tok.eos_token_ids == (4, 1)  # tokenizer_config first, then generation_config's [1, 4]
    rendered = tok.apply_chat_template([{"role": "user", "content": " hi "}])
    assert rendered == "<|bos|><|im_start|>user<|im_end|>\n\nhi<|im_end|><|im_start|>assistant<|im_end|>\n\n"
    with pytest.raises(ValueError, match="unsupported role developer"):
        tok.apply_chat_template([{"role": "developer", "content": "{}"}])
    # The template does not read `tools`: a tool result reaches it as a user turn (model_files.tools_prompt).
    assert tok.apply_chat_template([{"role": "tool", "content": "{}"}], add_generation_prompt=False) == (
        "<|bos|><|im_start|>user<|im_end|>\n\n<tool_response>\n{}\n</tool_response><|im_end|>"
    )
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(folder)
    assert (
        hf.apply_chat_template([{"role": "user", "content": " hi "}], tokenize=False, add_generation_prompt=True)
        == rendered
    )


def test_qwen_style_config_without_bos(tiny_model_dir, tmp_path):
    folder = copy_model(tiny_model_dir, tmp_path / "qwen", bos_token=None, eos_token="<|im_end|>")
    (folder / "generation_config.json").unlink()
    (folder / "config.json").write_text(json.dumps({"eos_token_id": 1}))
    tok = Tokenizer.from_dir(folder)
    assert tok.bos_token_id is None
    assert tok.eos_token_ids == (4, 1)
    assert tok.encode("hello", add_bos=True) == tok.encode("hello")


def test_chat_template_file_wins_over_config(tiny_model_dir, tmp_path):
    folder = copy_model(tiny_model_dir, tmp_path / "jinja")
    (folder / "chat_template.jinja").write_text("{% for m in messages %}[{{ m['role'] }}]{% endfor %}")
    assert Tokenizer.from_dir(folder).apply_chat_template(CHAT) == "[system][user][assistant]"


def test_legacy_list_of_named_templates(tiny_model_dir, tmp_path):
    folder = copy_model(
        tiny_model_dir,
        tmp_path / "named",
        chat_template=[{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "default"}],
    )
    assert Tokenizer.from_dir(folder).apply_chat_template(CHAT) == "default"


def test_missing_template_fails_only_when_used(tiny_model_dir, tmp_path):
    tok = Tokenizer.from_dir(copy_model(tiny_model_dir, tmp_path / "plain", chat_template=None))
    assert tok.encode("hello")
    with pytest.raises(ValueError, match="this tokenizer has no chat_template"):
        tok.apply_chat_template(CHAT)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"chat_template": "{% for m in messages %}"}, r"chat_template is not valid jinja \(line 1\)"),
        ({"chat_template": [{"name": "tool_use", "template": "x"}]}, "must be a string or a list with a 'default'"),
        ({"bos_token": 5}, r"bos_token must be a string or \{'content': ...\}, got 5"),
        ({"eos_token": "<|nope|>"}, r"eos_token '<\|nope\|>' is not in the tokenizer vocabulary"),
    ],
)
def test_bad_tokenizer_config_is_rejected(tiny_model_dir, tmp_path, change, error):
    with pytest.raises(ValueError, match=error):
        Tokenizer.from_dir(copy_model(tiny_model_dir, tmp_path / "bad", **change))


def test_missing_or_broken_files_are_rejected(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        Tokenizer.from_dir(tmp_path / "nowhere")
    folder = copy_model(tiny_model_dir, tmp_path / "broken")
    (folder / "generation_config.json").write_text('{"eos_token_id": "x"}')
    with pytest.raises(ValueError, match="eos_token_id must be an int or a list of ints"):
        Tokenizer.from_dir(folder)
    (folder / "generation_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="generation_config.json is not valid JSON"):
        Tokenizer.from_dir(folder)
    (folder / "tokenizer_config.json").unlink()
    with pytest.raises(ValueError, match="no tokenizer_config.json in"):
        Tokenizer.from_dir(folder)
    (folder / "tokenizer.json").write_text('{"model": 1}')
    with pytest.raises(ValueError, match="tokenizer.json is not a valid tokenizer"):
        Tokenizer.from_dir(folder)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="no tokenizer.json in"):
        Tokenizer.from_dir(folder)


def test_long_texts_tokenize_to_the_same_ids_with_the_gil_released(tok):
    from agentserve.model_files.tokenizer import GIL_FREE_CHARS

    text = "".join(TEXTS) * (GIL_FREE_CHARS // len("".join(TEXTS)) + 2)
    assert len(text) > GIL_FREE_CHARS
    assert tok.encode(text) == tok._backend.encode(text, add_special_tokens=False).ids
    assert tok.encode(text, add_bos=True)[1:] == tok.encode(text)
