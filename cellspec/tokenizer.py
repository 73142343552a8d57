"""Text <-> token ids: the artifact's tokenizer.json, its chat template, incremental decoding.

A chat template is rendered as Hugging Face's `apply_chat_template` does (a sandboxed jinja2
environment with `raise_exception` and `tojson`, `bos_token` and `eos_token` as strings), and the
rendered text is encoded without adding special tokens: the template already wrote them, and the
tokenizer matches their text as the special tokens they are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from cellspec.artifact import Manifest
from cellspec.errors import InvalidArgument, InvalidArtifact

REPLACEMENT_CHAR = "\ufffd"  # what a decoder prints for an incomplete UTF-8 sequence


class Tokenizer:
    def __init__(self, tokenizer: Any, bos_token_id: int | None, eos_token_ids: Sequence[int],
                 chat_template: str | None) -> None:
        self.tokenizer = tokenizer  # a `tokenizers.Tokenizer`
        self.bos_token_id = bos_token_id
        self.eos_token_ids = tuple(eos_token_ids)
        self.chat_template = chat_template

    @classmethod
    def load(cls, folder: str | Path, manifest: Manifest) -> Tokenizer:
        from tokenizers import Tokenizer as HfTokenizer

        model = manifest.model
        if model.tokenizer is None:
            raise InvalidArtifact(f"{folder}: the artifact has no tokenizer")
        path = Path(folder) / model.tokenizer
        try:
            tokenizer = HfTokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises plain Exception on a bad file
            raise InvalidArtifact(f"{path}: not a readable tokenizer.json ({error})") from error
        return cls(tokenizer, model.bos_token_id, model.eos_token_ids, model.chat_template)

    @property
    def has_chat_template(self) -> bool:
        return bool(self.chat_template)

    def token_text(self, token_id: int | None) -> str:
        if token_id is None:
            return ""
        return self.tokenizer.id_to_token(token_id) or ""

    def encode(self, prompt: str, chat: bool) -> list[int]:
        """Token ids of a prompt; with `chat`, of the prompt as one user message."""
        if not isinstance(prompt, str):
            raise InvalidArgument(f"prompt {prompt!r}: expected a str")
        bad = next((i for i, c in enumerate(prompt) if "\ud800" <= c <= "\udfff"), None)
        if bad is not None:  # e.g. bytes of a command line that were not UTF-8
            raise InvalidArgument(f"prompt: character {bad} is a lone surrogate "
                                  f"({prompt[bad]!r}), not text; expected valid Unicode")
        if chat:
            ids = self.tokenizer.encode(self.render_chat(prompt), add_special_tokens=False).ids
        else:
            ids = self.tokenizer.encode(prompt, add_special_tokens=True).ids
        bos = self.bos_token_id
        if bos is not None and ids[:2] == [bos, bos]:  # the text began with BOS, and so did
            ids = ids[1:]  # the post-processor: the model must see one
        return ids

    def render_chat(self, prompt: str) -> str:
        messages = [{"role": "user", "content": prompt}]
        eos = self.eos_token_ids[0] if self.eos_token_ids else None
        return render_chat_template(self._template, messages, self.token_text(self.bos_token_id),
                                    self.token_text(eos))

    def check_chat_template(self) -> None:
        """Refuse (InvalidArtifact) a chat template that cannot render one user message."""
        problem = chat_template_problem(self.chat_template or "")
        if problem is not None:
            raise InvalidArtifact(f"chat template: {problem} (pass chat=False to go without it)")

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    @cached_property
    def _template(self) -> Any:
        if not self.chat_template:
            raise InvalidArgument("the model has no chat template (use chat=False)")
        try:
            return compile_chat_template(self.chat_template)
        except Exception as error:  # a template is foreign code: whatever it raises is its fault
            raise InvalidArtifact(f"chat template: {describe_template_error(error)}") from error


class TemplateRaised(InvalidArgument):
    """The template called `raise_exception(message)`: it refuses this conversation."""

    def __init__(self, message: str) -> None:
        super().__init__(f"chat template: {message}")
        self.message = message


PROBE_MESSAGES = ({"role": "user", "content": "Hello!"},)


def render_chat_template(template: Any, messages: Sequence[dict[str, str]], bos_token: str,
                         eos_token: str) -> str:
    """Render in the sandbox. The template refusing the conversation is an InvalidArgument; any
    other error (the sandbox refusing an attribute, a type error) is the artifact's."""
    try:
        return template.render(messages=list(messages), add_generation_prompt=True,
                               bos_token=bos_token, eos_token=eos_token)
    except TemplateRaised:
        raise
    except Exception as error:  # a template is foreign code: whatever it raises is its fault
        raise InvalidArtifact(f"chat template: {describe_template_error(error)}") from error


def chat_template_problem(source: str) -> str | None:
    """Why `source` cannot render a one-message conversation in the sandbox, None when it can."""
    try:
        template = compile_chat_template(source)
        template.render(messages=list(PROBE_MESSAGES), add_generation_prompt=True,
                        bos_token="<s>", eos_token="</s>")
    except Exception as error:  # a template is foreign code: whatever it raises is its fault
        return describe_template_error(error)
    return None


def describe_template_error(error: BaseException) -> str:
    """One line: what a template's compile or render raised."""
    from jinja2 import TemplateSyntaxError

    if isinstance(error, TemplateRaised):
        return f"it raises {error.message!r} for a one-message conversation"
    text = " ".join(str(error).split())
    if isinstance(error, TemplateSyntaxError):
        return f"does not compile (line {error.lineno}: {text})"
    return f"{type(error).__name__}: {text}"


def compile_chat_template(source: str) -> Any:
    """A jinja2 template in the environment Hugging Face renders chat templates in; raises
    jinja2's TemplateSyntaxError when it does not compile."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateRaised(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


class IncrementalDetokenizer:
    """Text deltas of a growing token sequence, never ending inside a UTF-8 character.

    Decodes a short window of tokens: `ids[prefix:read]` (already printed) and `ids[prefix:]`,
    and emits the difference, so a decoder that treats the first token specially (leading
    spaces) sees the same context each time. A delta ending in U+FFFD is held back until the
    next token completes the character; `flush` releases whatever remains.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # window start
        self.read = 0  # ids before `read` are in the text already returned

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        return self._delta(is_final=False)

    def flush(self) -> str:
        return self._delta(is_final=True)

    def _delta(self, is_final: bool) -> str:
        printed = self.tokenizer.decode(self.ids[self.prefix:self.read])
        text = self.tokenizer.decode(self.ids[self.prefix:])
        if len(text) <= len(printed) or (text.endswith(REPLACEMENT_CHAR) and not is_final):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return text[len(printed):]
