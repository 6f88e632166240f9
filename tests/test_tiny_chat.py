"""The embedded chat model ``tiny-chat`` (harness.models.tiny_chat), and a chat folder the harness did not build.

The first half checks the folder ``model: tiny-chat`` resolves to: what a hub download leaves on disk,
loaded by ``Auto*.from_pretrained(local_files_only=True)``, its byte-level BPE tokenizer, chat template,
special tokens and generation config, the warm start's data, the cache, and the ``tiny_chat`` section's
validation. The last test builds a Llama folder with a Llama-3-style chat template and no pad token,
and trains it a few GRPO steps through the CLI with ``task.template: auto``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from helpers import SMALL_MODEL, SMALL_TASK, cli

from harness import layout
from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
from harness.models import tiny as models
from harness.models import tiny_chat
from harness.models.names import check_model, resolve_model
from harness.models.tasks import CHAT_SYSTEM_PROMPT, chat_prompt, eos_token_ids, extract_answer
from harness.models.tiny_chat import (
    BOS_TOKEN,
    IM_END,
    IM_START,
    PAD_TOKEN,
    chat_sft_examples,
    tiny_chat_model_key,
)
from harness.settings.runs import RunSpec
from harness.settings.schema import TINY, TINY_CHAT, SpecError, TaskSpec, TinyChatModelSpec, TinyModelSpec

REPO = Path(__file__).resolve().parent.parent
TASK = TaskSpec(**SMALL_TASK)
SMALL = TinyChatModelSpec(vocab_size=320, **SMALL_MODEL)
HUB_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory) -> Path:
    return Path(
        resolve_model(TINY_CHAT, task=TASK, cache_dir=tmp_path_factory.mktemp("cache"), tiny_spec=SMALL)
    )


@pytest.fixture(scope="module")
def loaded(chat_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(chat_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(chat_dir, local_files_only=True)
    return tok, model


# ---------------------------------------------------------------------------------------------- the folder


@pytest.mark.slow
def test_folder_is_what_a_hub_download_leaves(chat_dir, loaded):
    from transformers import PreTrainedTokenizerFast

    assert chat_dir.name == tiny_chat_model_key(SMALL, TASK) and chat_dir.name.startswith(
        "tiny-chat-chain_sum-"
    )
    names = {p.name for p in chat_dir.iterdir()}
    assert set(HUB_FILES) <= names and not {"pytorch_model.bin", "vocab.txt"} & names
    tok, model = loaded
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert model.config.model_type == "qwen2" and model.config.vocab_size == len(tok) <= SMALL.vocab_size
    backend = json.loads((chat_dir / "tokenizer.json").read_text())
    assert backend["model"]["type"] == "BPE" and backend["pre_tokenizer"]["type"] == "Sequence"
    assert [p["type"] for p in backend["pre_tokenizer"]["pretokenizers"]] == ["Split", "ByteLevel"]
    assert backend["decoder"]["type"] == "ByteLevel"
    assert (tok.pad_token, tok.bos_token, tok.eos_token) == (PAD_TOKEN, BOS_TOKEN, IM_END)
    assert (
        IM_START in tok.all_special_tokens
        and len({tok.pad_token_id, tok.bos_token_id, tok.eos_token_id}) == 3
    )
    gen = json.loads((chat_dir / "generation_config.json").read_text())
    assert (gen["eos_token_id"], gen["pad_token_id"], gen["bos_token_id"]) == (
        tok.eos_token_id,
        tok.pad_token_id,
        tok.bos_token_id,
    )
    assert (chat_dir / "chat_template.jinja").read_text() == tok.chat_template == tiny_chat.CHAT_TEMPLATE
    info = json.loads((chat_dir / models.INFO_FILE).read_text())
    assert info["model"] == TINY_CHAT and info["spec"]["sft_steps"] == SMALL.sft_steps
    assert info["longest_sft_sequence"] <= SMALL.max_position_embeddings
    # what validation checks without building the model
    assert tiny_chat.sft_lengths(SMALL, TASK)[:2] == (
        info["longest_prompt_tokens"],
        info["longest_sft_sequence"],
    )


def test_chat_template_renders_system_prompt_and_generation_prompt(loaded):
    tok, _ = loaded
    messages = chat_prompt({"question": "What is 4 + 3?"})
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == (
        f"{BOS_TOKEN}{IM_START}system\n{CHAT_SYSTEM_PROMPT}{IM_END}\n"
        f"{IM_START}user\nWhat is 4 + 3?{IM_END}\n{IM_START}assistant\n"
    )
    without = tok.apply_chat_template(messages, tokenize=False)
    assert not without.endswith(f"{IM_START}assistant\n") and prompt.startswith(without)
    # the prompt is a token prefix of prompt + answer: the SFT trains exactly what generation continues
    answered = [*messages, {"role": "assistant", "content": "<answer>7</answer>"}]
    whole = tok.apply_chat_template(answered, tokenize=False)
    assert whole == prompt + f"<answer>7</answer>{IM_END}"
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    assert tok(whole, add_special_tokens=False)["input_ids"][: len(ids)] == ids
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1


def test_tokenizer_round_trips(chat_dir, loaded):
    from tokenizers import Tokenizer

    tok, _ = loaded
    # what AutoTokenizer loads for a qwen2 folder (a Qwen2Tokenizer, rebuilt from vocab and merges) splits
    # text exactly as the saved tokenizer.json, which the warm start trained through
    assert type(tok).__name__ == "Qwen2Tokenizer" and tok.unk_token is None
    raw = Tokenizer.from_file(str(chat_dir / "tokenizer.json"))
    assert raw.get_vocab_size(with_added_tokens=True) == len(tok)
    prompt = tok.apply_chat_template(
        chat_prompt({"question": "1 + 12 ="}), tokenize=False, add_generation_prompt=True
    )
    for text in (
        CHAT_SYSTEM_PROMPT,
        "<answer>-13</answer>",
        "State 9 - 7 =",
        "né  \ttabs\nand ünïcode ✓",
        prompt,
    ):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert ids == raw.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
    assert len(tok(" the", add_special_tokens=False)["input_ids"]) == 1  # merges were learnt
    assert len(tok("12", add_special_tokens=False)["input_ids"]) == 2  # digits one by one, as Qwen2 splits
    for special in (PAD_TOKEN, BOS_TOKEN, IM_START, IM_END):
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1
    assert tok("x")["input_ids"] == tok("x", add_special_tokens=False)["input_ids"]  # nothing added
    ids = tok(f"{IM_START}assistant\n<answer>4</answer>{IM_END}", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == "assistant\n<answer>4</answer>"


def test_eos_stops_generation(chat_dir, loaded):
    from transformers import LogitsProcessor, LogitsProcessorList

    tok, model = loaded
    eos = tok.eos_token_id

    class EosAtThird(LogitsProcessor):  # any token twice, then the eos
        def __call__(self, input_ids, scores):
            scores = torch.full_like(scores, -1e9)
            scores[:, eos if input_ids.shape[1] - start >= 2 else 5] = 0.0
            return scores

    text = tok.apply_chat_template(
        chat_prompt({"question": "1 + 1 ="}), tokenize=False, add_generation_prompt=True
    )
    enc = tok(text, return_tensors="pt", add_special_tokens=False)
    start = enc["input_ids"].shape[1]
    model.eval()
    out = model.generate(
        **enc, max_new_tokens=10, do_sample=False, logits_processor=LogitsProcessorList([EosAtThird()])
    )
    assert out[0, start:].tolist() == [5, 5, eos]  # the folder's generation config stops at <|im_end|>
    assert eos_token_ids(model, tok) == [eos]


def test_sft_examples_carry_label_and_format_noise():
    spec = TinyChatModelSpec(sft_examples=800, label_noise=0.5, format_noise=0.25)
    examples = chat_sft_examples(spec, TASK)
    assert len(examples) == 800
    well_formed = wrong = 0
    for messages, answer in examples:
        assert messages[0] == {"role": "system", "content": CHAT_SYSTEM_PROMPT}
        assert messages[1]["role"] == "user"
        written = extract_answer(answer, "chat")
        well_formed += written is not None
        expression = messages[1]["content"].rsplit(":", 1)[1].rstrip("= ")
        wrong += written is not None and written != str(eval(expression))
    assert 0.68 < well_formed / 800 < 0.82
    assert 0.4 < wrong / well_formed < 0.6
    assert chat_sft_examples(spec, TASK) == examples  # seeded
    clean = chat_sft_examples(TinyChatModelSpec(sft_examples=50, label_noise=0.0, format_noise=0.0), TASK)
    assert all(a.startswith("<answer>") and a.endswith("</answer>") for _, a in clean)


# ---------------------------------------------------------------------------------------------- cache, names


def test_cache_key_and_reuse(chat_dir, monkeypatch):
    from harness.models.tiny import tiny_model_key

    assert tiny_chat_model_key(SMALL, TASK) == tiny_chat_model_key(
        SMALL,
        TaskSpec(TASK.name, TASK.kwargs, template="chat", train_size=5, eval_size=5, rewards=("format",)),
    )
    for other in ({"vocab_size": 400}, {"format_noise": 0.0}, {"seed": 1}):
        assert tiny_chat_model_key(SMALL, TASK) != tiny_chat_model_key(TinyChatModelSpec(**other), TASK)
    harder = TaskSpec(TASK.name, {**TASK.kwargs, "max_digits": 2})
    assert tiny_chat_model_key(SMALL, TASK) != tiny_chat_model_key(SMALL, harder)
    assert tiny_chat_model_key(SMALL, TASK) != tiny_model_key(TinyModelSpec(), TASK)

    def fail(*args, **kwargs):
        raise AssertionError("rebuilt a cached model")

    monkeypatch.setattr(tiny_chat, "build_tiny_chat_model", fail)
    assert resolve_model(TINY_CHAT, TASK, chat_dir.parent, SMALL) == str(chat_dir)
    assert sorted(p.name for p in chat_dir.parent.iterdir() if p.is_dir()) == [chat_dir.name]


def test_model_names():
    assert check_model(TINY_CHAT) == []
    with pytest.raises(ValueError, match="needs the task and a cache_dir"):
        resolve_model(TINY_CHAT)
    with pytest.raises(ValueError, match="takes a TinyChatModelSpec"):
        resolve_model(TINY_CHAT, TASK, "/nonexistent", TinyModelSpec())


# ---------------------------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"vocab_size": 100},
            "tiny_chat.vocab_size = 100 must be > 260: the tokenizer holds 256 byte tokens",
        ),
        ({"format_noise": 1.5}, "tiny_chat.format_noise = 1.5 is a fraction of SFT answers"),
        ({"label_noise": -0.1}, "tiny_chat.label_noise = -0.1 is a fraction of SFT answers"),
        (
            {"hidden_size": 64, "num_heads": 3},
            "tiny_chat.hidden_size = 64 must be a multiple of tiny_chat.num_heads = 3.",
        ),
        (
            {"num_heads": 4, "num_kv_heads": 3},
            "tiny_chat.num_heads = 4 must be a multiple of tiny_chat.num_kv_heads = 3.",
        ),
        ({"sft_lr": 0.0}, "tiny_chat.sft_lr = 0.0 must be a finite number > 0."),
        ({"vocab_sise": 300}, "tiny_chat: unknown key 'vocab_sise'; TinyChatModelSpec has"),
    ],
)
def test_bad_tiny_chat_settings_are_refused(values, expected):
    settings = {"model": TINY_CHAT, "task": {"name": "chain_sum"}, "tiny_chat": values}
    with pytest.raises(SpecError) as err:
        RunSpec(grid="g", settings=settings)
    assert any(expected in p for p in err.value.problems), err.value.problems


def _grid(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"include": str(REPO / "ablations" / "base.yaml"), "name": "g", **data}))
    return path


@pytest.mark.slow
def test_tiny_chat_section_belongs_to_tiny_chat_runs_only(tmp_path):
    plain = expand(load_grid(_grid(tmp_path, {}))).runs[0]
    with_section = expand(load_grid(_grid(tmp_path, {"tiny_chat": {"sft_steps": 7}}))).runs[0]
    assert with_section.run_id == plain.run_id and "tiny_chat" not in with_section.settings
    chat = expand(load_grid(_grid(tmp_path, {"model": TINY_CHAT, "tiny_chat": {"sft_steps": 7}}))).runs[0]
    assert chat.tiny == TinyChatModelSpec(sft_steps=7) and "tiny" not in chat.settings
    assert chat.run_id != plain.run_id and plain.model == TINY and isinstance(plain.tiny, TinyModelSpec)
    plan = expand(
        load_grid(_grid(tmp_path, {"model": TINY_CHAT, "grid": {"tiny_chat.vocab_size": [100, 300]}}))
    )
    report = validate_plan(plan)
    assert len(plan.runs) == 1 and plan.runs[0].tiny.vocab_size == 300
    assert "tiny_chat.vocab_size = 100 must be > 260" in report.format()
    with pytest.raises(SpecError, match="TinyChatModelSpec has no field 'vocab'"):
        load_grid(_grid(tmp_path, {"model": TINY_CHAT}), ["tiny_chat.vocab=300"])


@pytest.mark.slow
def test_templates_with_tiny_chat(tmp_path):
    for template, ok, warned in (("auto", True, False), ("chat", True, False), ("bare", True, True)):
        data = {"model": TINY_CHAT, "task": {"template": template, "rewards": ["correctness", "format"]}}
        report = validate_plan(expand(load_grid(_grid(tmp_path, data))))
        assert report.ok is ok, report.format()
        assert any("warm-started on chat prompts" in w.message for w in report.warnings) is warned
    report = validate_plan(expand(load_grid(_grid(tmp_path, {"task": {"template": "chat"}}))))
    assert "such as 'tiny-chat'" in report.format()


# ---------------------------------------------------------------------------------------------- a foreign folder

# Llama 3's layout: headers around the role, <|eot_id|> ends a turn, <|end_of_text|> is the tokenizer's eos
# and the generation config ends on either; no pad token; encoding adds <|begin_of_text|> (a post-processor),
# and the template writes it too.
LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
LLAMA3_SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
)


def build_llama_folder(out: Path) -> Path:
    """A random-weight Llama chat folder with its own byte-level BPE, made here with save_pretrained."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=list(LLAMA3_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(
        [CHAT_SYSTEM_PROMPT, "State the final answer to the following arithmetic problem"] * 4, trainer
    )
    bos = backend.token_to_id("<|begin_of_text|>")
    backend.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A $B",
        special_tokens=[("<|begin_of_text|>", bos)],
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        extra_special_tokens=list(LLAMA3_SPECIALS[2:]),
    )
    tok.chat_template = LLAMA3_TEMPLATE
    eot, eos = backend.token_to_id("<|eot_id|>"), tok.eos_token_id
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        bos_token_id=bos,
        eos_token_id=[eot, eos],
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = [eot, eos]
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.mark.slow
def test_foreign_chat_folder_trains_through_the_cli(tmp_path):
    """Any folder from_pretrained loads takes the same path: another architecture and chat template."""
    folder = build_llama_folder(tmp_path / "llama-chat")
    results = tmp_path / "results"
    cli(
        "run",
        "ablations/chat.yaml",
        "--results",
        str(results),
        "--no-report",
        f"-omodel={folder}",
        "-otask.template=auto",
        "-otask.train_size=32",
        "-otask.eval_size=8",
        "-ogrid.seed=[0]",
        "-ogrid.loss_type=[grpo]",
        "-otrainer.max_steps=2",
        "-otrainer.max_completion_length=4",
        "-oharness.eval_steps=2",
        "-oharness.samples_steps=1",
    )
    (run_dir,) = sorted((results / "chat" / layout.RUNS_DIR).iterdir())
    assert (run_dir / layout.DONE_FILE).exists()
    config = json.loads((run_dir / layout.CONFIG_FILE).read_text())["config"]
    assert config["model"] == str(folder) and "tiny_chat" not in config and "tiny" not in config
    df = pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    assert list(df["step"]) == [1, 2] and df["eval/accuracy"].notna().sum() == 1
    assert df["completions/max_length"].max() <= 4
    samples = [json.loads(line) for line in (run_dir / layout.SAMPLES_FILE).read_text().splitlines()]
    assert samples and {s["step"] for s in samples} == {1, 2}
    for s in samples:
        assert s["prompt"][0] == {"role": "system", "content": CHAT_SYSTEM_PROMPT}
        assert s["prompt_text"] == (
            f"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{CHAT_SYSTEM_PROMPT}<|eot_id|>"
            f"<|start_header_id|>user<|end_header_id|>\n\n{s['prompt'][1]['content']}<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
        )
    # TRL counted the prompts' tokens as that template and tokenizer make them (one <|begin_of_text|>, not two)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    prompt_tokens = len(tok(samples[0]["prompt_text"], add_special_tokens=False)["input_ids"])
    assert tok(samples[0]["prompt_text"], add_special_tokens=False)["input_ids"].count(tok.bos_token_id) == 1
    batch = config["trainer"]["per_device_train_batch_size"]
    first = df.iloc[0]
    assert first["num_tokens"] == pytest.approx(batch * (prompt_tokens + first["completions/mean_length"]))
    # the greedy eval stops where TRL's sampling stops: at the end of a turn as well as at the tokenizer's eos
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    assert eos_token_ids(model, tok) == [tok.eos_token_id, tok.convert_tokens_to_ids("<|eot_id|>")]
