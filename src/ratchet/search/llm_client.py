"""The two model backends of the LLM proposer, through the official SDKs, behind one ``complete()`` call.

- ``openai``: any OpenAI-compatible chat endpoint (OpenAI, vLLM, SGLang, llama.cpp, ...). The base URL
  is ``--llm-base-url``, else the SDK's own ``OPENAI_BASE_URL``; the key is ``OPENAI_API_KEY`` (a local
  server that checks none takes any value, e.g. ``EMPTY``). No output cap is sent: local servers refuse
  a ``max_tokens`` larger than their context, and the model's default is what users expect.
- ``anthropic``: the Messages API, key ``ANTHROPIC_API_KEY`` (``ANTHROPIC_BASE_URL`` or
  ``--llm-base-url`` for another host); ``max_tokens`` is required there.

Retries are the SDKs' own: ``max_retries`` (4, so up to 5 tries) on 408/409/429/5xx, connection errors
and timeouts, exponential backoff from 0.5 s doubling to 8 s with jitter, or the server's
``Retry-After``. What still fails is raised as :class:`ModelCallError`, one line, for the proposer to
record; nothing here ends a run.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

PROVIDERS = ("openai", "anthropic")
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


class LLMSetupError(Exception):
    """The LLM settings cannot work (no model, no key, ...); the message is one line for the user."""


class ModelCallError(Exception):
    """A model call failed after the SDK's retries; the message is one line."""


@dataclass(frozen=True)
class LLMSettings:
    model: str
    provider: str = "openai"
    base_url: str | None = None
    price_in_per_mtok: float = 0.0  # USD per million input tokens; 0 with price_out 0: cost unknown
    price_out_per_mtok: float = 0.0
    max_tokens_total: int | None = None  # stop calling the model once this many tokens were spent
    max_cost_usd: float | None = None  # ... or this much money
    max_output_tokens: int = 16000  # Anthropic only (required there)
    timeout_s: float = 600.0  # per request, as the SDKs count it
    max_retries: int = 4
    configs_per_candidate: int = 4  # the tuner's share of each new candidate's SPACE, defaults first

    @property
    def priced(self) -> bool:
        return self.price_in_per_mtok > 0 or self.price_out_per_mtok > 0

    def cost_usd(self, tokens_in: int | None, tokens_out: int | None) -> float | None:
        """What an answer cost, or None when no prices were given (unknown, not free)."""
        if not self.priced:
            return None
        return ((tokens_in or 0) * self.price_in_per_mtok + (tokens_out or 0) * self.price_out_per_mtok) / 1e6

    def check(self) -> None:
        """Raise LLMSetupError unless a model call could be made with these settings."""
        if self.provider not in PROVIDERS:
            raise LLMSetupError(f"--llm-provider must be one of {', '.join(PROVIDERS)}, not '{self.provider}'")
        if not self.model:
            raise LLMSetupError("--proposer llm needs --llm-model NAME (the model your endpoint serves)")
        key = KEY_ENV[self.provider]
        if not os.environ.get(key):
            hint = " (a local server that checks no key takes any value, e.g. EMPTY)" if self.provider == "openai" \
                else ""
            raise LLMSetupError(f"--proposer llm --llm-provider {self.provider} needs {key} in the environment{hint}")
        for name in ("price_in_per_mtok", "price_out_per_mtok"):
            if getattr(self, name) < 0:
                raise LLMSetupError("--llm-price-in and --llm-price-out must not be negative")
        if self.max_cost_usd is not None and (self.max_cost_usd <= 0 or not self.priced):
            raise LLMSetupError("--llm-max-cost needs a positive amount and --llm-price-in/--llm-price-out "
                                "(without prices the cost is unknown)")
        if self.max_tokens_total is not None and self.max_tokens_total <= 0:
            raise LLMSetupError("--llm-max-tokens-total must be positive")


@dataclass(frozen=True)
class Answer:
    text: str
    tokens_in: int | None  # as the server reported them; None when it reported no usage
    tokens_out: int | None
    wall_s: float
    finish_reason: str | None = None


def make_chat(settings: LLMSettings):
    """The backend for ``settings.provider`` (checked first), ready for ``complete(system, user)``."""
    settings.check()
    return (OpenAIChat if settings.provider == "openai" else AnthropicChat)(settings)


class OpenAIChat:
    def __init__(self, settings: LLMSettings):
        import openai

        self.settings = settings
        # base_url None: the SDK reads OPENAI_BASE_URL itself (then its default, api.openai.com).
        self.client = openai.OpenAI(base_url=settings.base_url or None, max_retries=settings.max_retries,
                                    timeout=settings.timeout_s)
        self._errors = (openai.APIError, openai.OpenAIError)

    def complete(self, system: str, user: str) -> Answer:
        start = time.monotonic()
        try:
            response = self.client.chat.completions.create(
                model=self.settings.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}])
        except self._errors as exc:
            raise ModelCallError(describe_error(exc, self.settings.max_retries)) from None
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content or "") if choice and choice.message else ""
        usage = response.usage
        return Answer(text, usage and usage.prompt_tokens, usage and usage.completion_tokens,
                      time.monotonic() - start, choice and choice.finish_reason)

    def close(self) -> None:
        self.client.close()


class AnthropicChat:
    def __init__(self, settings: LLMSettings):
        import anthropic

        self.settings = settings
        # An explicit timeout also keeps the SDK from refusing long non-streaming requests.
        self.client = anthropic.Anthropic(base_url=settings.base_url or None, max_retries=settings.max_retries,
                                          timeout=settings.timeout_s)
        self._errors = (anthropic.APIError, anthropic.AnthropicError)

    def complete(self, system: str, user: str) -> Answer:
        start = time.monotonic()
        try:
            response = self.client.messages.create(
                model=self.settings.model, max_tokens=self.settings.max_output_tokens, system=system,
                messages=[{"role": "user", "content": user}])
        except self._errors as exc:
            raise ModelCallError(describe_error(exc, self.settings.max_retries)) from None
        text = "".join(getattr(block, "text", "") for block in response.content or []
                       if getattr(block, "type", "") == "text")
        usage = response.usage
        tokens_in = None
        if usage is not None:  # cached prompt tokens are input too (billed at other rates; counted plainly)
            tokens_in = (usage.input_tokens or 0) + (getattr(usage, "cache_read_input_tokens", 0) or 0) + (
                getattr(usage, "cache_creation_input_tokens", 0) or 0)
        return Answer(text, tokens_in, usage and usage.output_tokens, time.monotonic() - start,
                      response.stop_reason)

    def close(self) -> None:
        self.client.close()


def describe_error(exc: Exception, retries: int) -> str:
    """One line: what failed, with the HTTP status where there is one."""
    status = getattr(exc, "status_code", None)
    message = " ".join(str(getattr(exc, "message", None) or exc).split())[:300]
    what = f"HTTP {status} ({type(exc).__name__})" if status is not None else type(exc).__name__
    retried = f" (the SDK retries 408/409/429/5xx, timeouts and lost connections up to {retries} times)"
    return f"{what}: {message}{retried}"
