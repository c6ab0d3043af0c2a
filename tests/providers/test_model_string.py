"""Model strings (S-PROF-6): parsing, inherit aliases, errors; hypothesis properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.providers import INHERIT_ALIASES, ModelSpec, ModelStringError, parse_model_string

providers = st.from_regex(r"[a-z][a-z0-9_-]{0,11}", fullmatch=True)
# Model names may hold ':' and '/' (tags, paths); no '$', no surrounding space.
models = st.text(
    alphabet=st.sampled_from(":/.-_ ") | st.characters(codec="utf-8", exclude_characters="$"),
    min_size=1,
    max_size=30,
).filter(lambda text: text.strip() == text and text != "")
efforts = st.none() | st.from_regex(r"[a-z0-9_-]{1,8}", fullmatch=True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("openai:gpt-4o", ModelSpec("openai", "gpt-4o")),
        ("openai/gpt-4o", ModelSpec("openai", "gpt-4o")),
        ("anthropic/claude-sonnet-4-5$high", ModelSpec("anthropic", "claude-sonnet-4-5", "high")),
        ("OpenAI:o3$HIGH", ModelSpec("openai", "o3", "high")),
        ("openai:llama3.1:8b", ModelSpec("openai", "llama3.1:8b")),
        ("openai/meta-llama/Llama-3-8B", ModelSpec("openai", "meta-llama/Llama-3-8B")),
        ("scripted:/tmp/run:1/scenario.yaml", ModelSpec("scripted", "/tmp/run:1/scenario.yaml")),
        ("scripted//abs/path.yaml", ModelSpec("scripted", "/abs/path.yaml")),
        ("  ollama:qwen2.5  ", ModelSpec("ollama", "qwen2.5")),
    ],
)
def test_parses_provider_model_and_effort_s_prof_6(text: str, expected: ModelSpec) -> None:
    assert parse_model_string(text) == expected


@pytest.mark.parametrize(
    "alias", ["inherit", "main", "sonnet", "opus", "haiku", "Sonnet", " opus "]
)
def test_inherit_aliases_parse_to_none_s_prof_6(alias: str) -> None:
    assert parse_model_string(alias) is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("gpt-4o", "has no provider part: write provider:model, e.g. openai:gpt-4o"),
        ("claude-opus-4", "did you mean 'anthropic:claude-opus-4'?"),
        (":gpt-4o", "has no provider part"),
        ("/abs/path.yaml", "has no provider part"),
        ("9lives:x", "is not a provider name"),
        ("openai:", "has no model part"),
        ("openai:$high", "has no model part"),
        ("openai:o3$", "malformed effort suffix"),
        ("openai:o3$very high", "malformed effort suffix"),
        ("openai:o3$a$b", "malformed effort suffix"),
        ("", "model string is empty"),
        ("   ", "model string is empty"),
    ],
)
def test_malformed_strings_say_how_to_write_them(text: str, fragment: str) -> None:
    with pytest.raises(ModelStringError, match=None) as caught:
        parse_model_string(text)
    assert fragment in str(caught.value)


def test_non_text_is_a_model_string_error() -> None:
    with pytest.raises(ModelStringError, match="must be text"):
        parse_model_string(42)  # type: ignore[arg-type]


@given(providers, models, efforts)
def test_rendered_spec_parses_back_to_itself(provider: str, model: str, effort: str | None) -> None:
    spec = ModelSpec(provider, model, effort)
    assert parse_model_string(str(spec)) == spec


@given(providers, models, efforts, st.sampled_from([":", "/"]))
def test_both_separators_keep_the_whole_model(
    provider: str, model: str, effort: str | None, separator: str
) -> None:
    suffix = f"${effort}" if effort is not None else ""
    spec = parse_model_string(f"{provider}{separator}{model}{suffix}")
    assert spec == ModelSpec(provider, model, effort)


@given(st.lists(st.from_regex(r"[A-Za-z0-9 ._:-]{1,8}", fullmatch=True), min_size=1, max_size=4))
def test_scripted_paths_keep_slashes_and_colons(parts: list[str]) -> None:
    path = "/" + "/".join(part.strip() or "x" for part in parts)
    spec = parse_model_string(f"scripted:{path}")
    assert spec == ModelSpec("scripted", path)


@given(st.text(max_size=40))
def test_any_text_parses_or_raises_model_string_error(text: str) -> None:
    try:
        spec = parse_model_string(text)
    except ModelStringError as error:
        assert repr(text) in str(error) or "empty" in str(error)
        return
    if spec is None:
        assert text.strip().lower() in INHERIT_ALIASES
    else:
        assert spec.provider == spec.provider.lower()
        assert spec.model and "$" not in spec.model


@given(st.text(alphabet=st.characters(exclude_characters=":/"), min_size=1, max_size=30))
def test_text_without_separator_has_no_provider_part(text: str) -> None:
    if text.strip().lower() in INHERIT_ALIASES or not text.strip():
        return
    with pytest.raises(ModelStringError, match="has no provider part"):
        parse_model_string(text)
