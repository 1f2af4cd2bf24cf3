"""``%openprogram provider [NAME] [--model M]``: show or choose the notebook's provider."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import CommandError, Host, arg, command, session_or_current


@command(
    "provider",
    "show or choose the provider: test | openai | anthropic | replay",
    arg("name", nargs="?", metavar="NAME"),
    arg("--model", default="", metavar="M"),
)
def provider(host: Host, args: Namespace) -> None:
    from openprogram.providers import PROVIDER_NAMES, create_runtime

    if args.name is None:
        rt = host.runtime()
        print(f"provider: {rt.provider.name if rt.provider else 'none'} model: {rt.model}")
        return
    name, model = args.name, args.model
    if name not in PROVIDER_NAMES:
        raise CommandError(f"unknown provider {name!r}; choose one of {', '.join(PROVIDER_NAMES)}")
    replay = None
    if name == "replay":  # answers from this notebook's session, re-run from its root
        from openprogram_magics.sharing import replay_from_root

        replay = session_or_current(host, None)
        host.set_session(replay_from_root(replay, host.current_meta()))
    host.replay_session = replay  # the runtime is built with it: a value, not the environment
    create_runtime(host.provider_named(name, model or None), model or None)  # fail now
    # the notebook's layer, recorded in its metadata (name and model, never a key); a model
    # not given here comes from the layers below (%config, OPENPROGRAM_MODEL, the default)
    host.choose_provider(name, model or None)
    # calls made outside a turn use the same runtime: the notebook claims them as a host
    print(f"openprogram: provider {name}" + (f" (model {model})" if model else ""))
    host.runtime()  # says once where the settings it does not name come from
