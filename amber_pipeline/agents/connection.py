"""How each Agent reaches a Model: through the model proxy, with its Trial token.

`harbor_agent` gives Harbor's agent (by name for those that call no Model,
else by the import path of Amber's class of it), the model name in its own
convention, and the proxy's address and the Trial token where that Agent
looks for a base URL and an API key (all checked against Harbor 0.25's
sources, and end to end against the provider double):

- Claude Code: Anthropic Messages; ``ANTHROPIC_BASE_URL`` = the proxy's root
  (it adds ``/v1/messages``), ``ANTHROPIC_API_KEY`` = the token.
- Codex CLI: OpenAI Responses over HTTPS; a model provider of its own in its
  ``config.toml`` (the proxy's ``/v1``, the token from ``OPENAI_API_KEY``,
  WebSockets off: the built-in ``openai`` provider tries the Responses
  WebSocket five times, about 7 s, before it falls back), and its analytics
  off (at exit it waits 5 s to send them to a host a sandbox cannot reach).
- pi: Chat Completions (``openai-completions``) for OpenAI-style Providers,
  Anthropic Messages for Anthropic; a ``models.json`` custom provider at the
  proxy, its key read from ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``.
- mini-swe-agent: litellm inside the sandbox, ``openai/<model>`` (Chat
  Completions) at the proxy's ``/v1``, or ``anthropic/<model>`` at its root;
  litellm's price list is read locally (no fetch from a sandbox that cannot
  reach it).
- Terminus-2 runs on the host, through litellm the same way; its OpenAI-style
  calls name no organization or project (litellm and the openai SDK would
  take them from the server's environment: OPENAI_ORGANIZATION, OPENAI_ORG_ID,
  OPENAI_PROJECT_ID).

Every Agent that calls a Model runs as Amber's subclass of Harbor's class
(`agents.installed`, `agents.terminus`), which reads none of the server's
environment: what is given here is all it has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from amber_pipeline.agents.specs import AgentSpec

# Harbor's Agents as Amber runs them, imported by Harbor from these paths (so that naming one here does not
# import Harbor).
_CLASSES = {"terminus-2": "amber_pipeline.agents.terminus:Terminus2",
            "claude-code": "amber_pipeline.agents.installed:ClaudeCode",
            "codex": "amber_pipeline.agents.installed:Codex",
            "pi": "amber_pipeline.agents.installed:Pi",
            "mini-swe-agent": "amber_pipeline.agents.installed:MiniSweAgent"}
# Headers litellm and the openai SDK fill from the server's environment when a call names none; sent empty, they
# carry nothing.
_NO_OPENAI_ACCOUNT = {"OpenAI-Organization": "", "OpenAI-Project": ""}


@dataclass(frozen=True)
class HarborAgent:
    """What Harbor's `AgentConfig` gets for one Trial attempt."""

    name: str | None = None
    import_path: str | None = None
    model_name: str | None = None
    kwargs: dict[str, object] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


def harbor_agent(spec: AgentSpec, *, litellm_prefix: str | None = None, model: str | None = None,
                 proxy: str | None = None, token: str | None = None) -> HarborAgent:
    """Harbor's configuration of `spec` for a Trial whose calls go to the model proxy at `proxy` (its root URL)
    with `token`, for the Model `model` of a Provider that litellm names with `litellm_prefix`."""
    kwargs: dict[str, object] = dict(spec.settings)
    if not spec.needs_model:
        return HarborAgent(name=spec.name, kwargs=kwargs)
    assert litellm_prefix and model and proxy and token, "an Agent that calls a Model needs the proxy and a token"
    # Claude Code speaks only Anthropic Messages (a replay answers it so too); the others follow the Provider.
    anthropic = litellm_prefix == "anthropic" or spec.name == "claude-code"
    v1 = proxy if anthropic else f"{proxy}/v1"  # Anthropic's clients add /v1/messages themselves
    litellm_model = f"{'anthropic' if anthropic else litellm_prefix}/{model}"
    if spec.software is None:  # Terminus-2, on the host: litellm
        kwargs |= {"api_base": v1, "llm_kwargs": {"api_key": token}}
        if not anthropic:
            kwargs["llm_call_kwargs"] = {"extra_headers": dict(_NO_OPENAI_ACCOUNT)}
        return HarborAgent(import_path=_CLASSES[spec.name], model_name=litellm_model, kwargs=kwargs)
    kwargs |= {"version": spec.software.version, "base_url": v1}
    key = "ANTHROPIC_API_KEY" if anthropic else "OPENAI_API_KEY"
    env = {key: token}
    if spec.name == "codex":
        kwargs["config"] = {"model_provider": "amber", "model_providers": {"amber": {
            "name": "Amber model proxy", "base_url": v1, "env_key": key, "wire_api": "responses",
            "supports_websockets": False}}, "analytics": {"enabled": False}}
    if spec.name == "pi":
        kwargs["model_api"] = "anthropic-messages" if anthropic else "openai-completions"
    if spec.name == "mini-swe-agent":
        env |= {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "MSWEA_COST_TRACKING": "ignore_errors"}
    return HarborAgent(import_path=_CLASSES[spec.name], model_name=litellm_model, kwargs=kwargs, env=env)
