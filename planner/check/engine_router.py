"""The router of a disaggregated serving deployment in an engine launch file, for `planner check`.

A disaggregated deployment runs prefill workers and decode workers (SGLang's disaggregation mode
prefill or decode, vLLM's KV-transfer config) and a router in front of them, which sends each request to a
prefill worker, then to a decode worker, and tells the decode worker where to fetch the KV cache from.
The routers read here: SGLang's `python -m sglang_router.launch_router` (PyPI sglang-router 0.3.2) and
vLLM's `vllm-router` (PyPI vllm-router 0.1.17, vllm-project/router), each with its PD switch, a prefill flag
per prefill worker (URL, and for SGLang the worker's bootstrap port), a decode flag per decode worker (URL),
and for vLLM the workers' KV connector; their flags and defaults are in the engine tables (`planner.frameworks.sglang` /
`vllm`: ROUTER_FLAG, ROUTER_ALL_FLAGS, recorded from each package's parser).

A router's URLs are matched to the file's workers by port (a worker's `--port`, else the engine's default),
and its URLs' hosts tell which workers share a host. The rules (`findings`): disaggregated workers without a
router (warning: no request reaches them as a pair); a router without its disaggregation switch (error: it
runs in its regular mode); a URL naming no worker of the file (error); a worker no router names (warning);
SGLang: a prefill URL at a decode worker or the reverse, a bootstrap port the router passes that is not the
prefill worker's, two prefill workers of one host on one bootstrap port, a worker the router reaches at
another host while it listens on the loopback (SGLang's default host); vLLM: two workers of one host whose
NIXL handshake ports overlap, a prefill worker whose decode peers run on another host while it advertises
localhost, a router connector that is not the workers' (errors, each with its numbers and a fix); workers of one
role that differ in layout or batch (warning: the router spreads requests evenly). A router in its regular mode
(ROUTER_FLAG["workers"]: the URLs of independent, aggregated servers) over servers of the file that differ in
layout or batch: warning router_unlike_servers, for the same reason (`_unlike_servers`). Unknown
router flags are errors naming the closest one, as for the engines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from planner.check import engine_launch as el
from planner.check import shell
from planner.errors import SpecError
from planner.placement.rules import Violation

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
"""Hosts that name the machine itself."""


@dataclass(frozen=True)
class Route:
    """One worker a router names."""

    role: str
    """prefill / decode (the router flag it follows)."""
    url: str
    host: str
    port: int | None
    bootstrap: str | None
    """The word after a prefill URL (SGLang's bootstrap port, or 'none'); None when absent."""


@dataclass(frozen=True)
class Router:
    """A router command of the file."""

    line: int
    command: el.Command
    routes: tuple[Route, ...]


def routers(text: str, table) -> list[Router]:
    """The router commands of a file (`table`: the engine's flag table, `planner.frameworks.vllm` / `sglang`).
    A line that is no shell syntax is skipped: the engine reader reports it."""
    out, variables = [], {}
    for line, code in el.logical_lines(text):
        try:
            words = shell.unwrap(shell.join_expansions(shell.split(shell.let_assignments(code))), "")
        except (ValueError, SpecError):
            continue
        for segment in shell.segments(words):  # the script's variables and arithmetic, as the engine reader reads them
            expanded = shell.expand_command(segment, variables)
            at = None if expanded is None else el.find_launcher(expanded, table.ROUTER_LAUNCHERS)
            if at is not None:
                out.append(_parse(expanded[at:], line, table))
    return out


def _parse(words: list[str], line: int, table) -> Router:
    """A router's flags as its argparse parser reads them: the prefill flag takes one or more words (URL
    [BOOTSTRAP_PORT]), the decode flag one, the switches none, every other flag one."""
    f = table.ROUTER_FLAG
    flags, spelled, routes, i = {}, {}, [], 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-"):
            continue
        name, eq, value = word.partition("=")
        canonical = el.option(name, table.ROUTER_ALL_FLAGS, {})
        spelled[canonical] = name
        values = [value] if eq else []
        if canonical == f["workers"]:
            while not eq and i < len(words) and not words[i].startswith("-"):
                values.append(words[i])
                i += 1
            routes += [_route("server", [url]) for url in values]
            flags[canonical] = True
        elif canonical in (f["prefill"], f["decode"]):
            most = 2 if canonical == f["prefill"] else 1
            while not eq and len(values) < most and i < len(words) and not words[i].startswith("-"):
                values.append(words[i])
                i += 1
            if values:
                routes.append(_route("prefill" if canonical == f["prefill"] else "decode", values))
            flags[canonical] = True
        elif canonical in table.ROUTER_SWITCHES or not (values or (i < len(words) and not words[i].startswith("-"))):
            flags[canonical] = True
        else:
            if not values:
                values, i = [words[i]], i + 1
            flags[canonical] = values[0]
    command = el.Command(line=line, env={}, positional=[], flags=flags, spelled=spelled)
    return Router(line=line, command=command, routes=tuple(routes))


def _route(role: str, values: list[str]) -> Route:
    url = values[0]
    found = re.fullmatch(r"[A-Za-z][\w+.-]*://(.*?)(?::(\d+))?/*", url)
    host, port = (found.group(1), int(found.group(2)) if found.group(2) else None) if found else (url, None)
    return Route(role=role, url=url, host=host, port=port, bootstrap=values[1] if len(values) > 1 else None)


def _literal(value, default: int) -> int | None:
    """An integer flag or variable as written (None: not a literal, e.g. a shell variable)."""
    if value is None:
        return default
    return int(value) if isinstance(value, str) and value.isdigit() else None


def findings(engine: str, table, text: str, commands: list[el.Command],
             launches: list[el.Launch]) -> tuple[list[dict], list[tuple[int, Violation]]]:
    """(a row per router {line, router, prefill, decode, port}, the routers' findings with their lines)
    of a file whose worker commands are `commands`, read as `launches` (module docstring)."""
    found = routers(text, table)
    workers = [(c, launch) for c, launch in zip(commands, launches) if launch.role and launch.node_rank == 0]
    rows, out = [], []
    f = table.ROUTER_FLAG
    if workers and not found:
        launcher = " ".join(("python -m " if "." in w[0] else "") + w[0] for w in table.ROUTER_LAUNCHERS)
        out.append((workers[0][0].line, Violation(
            rule="router_missing", severity="warning",
            message=f"{len(workers)} disaggregated worker(s) and no router command: a request must go to a prefill "
                    f"worker, then to a decode worker told where the KV cache is, which the router does "
                    f"({table.ROUTER_VERSION})",
            fix=f"{launcher} {f['pd']} {f['prefill']} URL ... {f['decode']} URL ...")))
    port_of = {id(c): _literal(c.flags.get(table.FLAG["port"]), table.PORT) for c, _ in workers}
    routed = set()
    servers = [(c, launch) for c, launch in zip(commands, launches) if not launch.role and launch.node_rank == 0]
    for router in found:
        pairs = []
        served = [(route, c, launch) for route in router.routes if route.role == "server" for c, launch in servers
                  if _literal(c.flags.get(table.FLAG["port"]), table.PORT) == route.port]
        out += [(router.line, v) for v in _unlike_servers(table, served)]
        for route in router.routes:
            if route.role == "server":
                continue
            matches = [(c, launch) for c, launch in workers if port_of[id(c)] == route.port]
            routed |= {id(c) for c, _ in matches}
            if not matches:
                ports = ", ".join(str(port_of[id(c)]) for c, _ in workers) or "none"
                out.append((router.line, Violation(
                    rule="router_worker_unknown",
                    message=f"{f[route.role]} {route.url} names no disaggregated worker of this file (their ports: "
                            f"{ports})", fix=f"{f[route.role]} with the URL of a worker's {table.FLAG['port']}")))
            pairs += [(route, c, launch) for c, launch in matches]
        out += [(router.line, v) for v in _router_rules(engine, table, router, pairs, workers)]
        port = router.command.flags.get(f["port"])
        rows.append({"line": router.line, "router": table.ROUTER_VERSION,
                     "port": port if isinstance(port, str) else None,
                     "prefill": [r.url for r in router.routes if r.role == "prefill"],
                     "decode": [r.url for r in router.routes if r.role == "decode"],
                     "servers": [r.url for r in router.routes if r.role == "server"]})
    if found:
        for c, _ in workers:
            if id(c) not in routed:
                out.append((c.line, Violation(
                    rule="router_worker_unrouted", severity="warning",
                    message=f"the disaggregated worker on {table.FLAG['port']} {port_of[id(c)]} is named by no "
                            f"router: it "
                            f"receives no requests", fix=f"{f['prefill']} or {f['decode']} with its URL")))
    return rows, out


def _router_rules(engine: str, table, router: Router, pairs: list, workers: list) -> list[Violation]:
    f = table.ROUTER_FLAG
    out = el.unknown_flags(router.command, table.ROUTER_ALL_FLAGS, table.ROUTER_VERSION.split()[0],
                           table.ROUTER_VERSION)
    if any(r.role != "server" for r in router.routes) and router.command.flags.get(f["pd"]) is not True:
        out.append(Violation(rule="router_mode",
                             message=f"{f['prefill']} / {f['decode']} without {f['pd']}: the router runs in its "
                                     f"regular mode, not prefill then decode ({table.ROUTER_VERSION})",
                             fix=f"add {f['pd']}"))
    rules = _sglang_rules if engine == "sglang" else _vllm_rules
    return out + _unlike(table, pairs) + rules(table, router, pairs, workers)


def _unlike(table, pairs: list) -> list[Violation]:
    """`router_unlike_workers` (warning): workers of one role behind the router that differ in layout or in the
    sequences they run at once: the router spreads requests over a role's workers evenly, with no per-worker
    weight (`planner.serve.ROUTER_SPLIT` cites both routers' sources), so the smaller worker gets as many requests
    as the larger one and queues while the other idles."""
    out, f = [], table.FLAG
    for role in ("prefill", "decode"):
        kinds = {}
        for route, _, launch in pairs:
            if route.role == role and launch.role in (role, "disaggregated"):
                kinds.setdefault((launch.inst, launch.replicas, launch.max_num_seqs), route.url)
        if len(kinds) > 1:
            (a, url_a), (b, url_b) = list(kinds.items())[:2]
            describe = lambda k: f"{k[1]} x {k[0].label}, {f['max_num_seqs']} {k[2] or 'default'}"  # noqa: E731
            out.append(Violation(
                rule="router_unlike_workers", severity="warning",
                message=f"the {role} workers {url_a} ({describe(a)}) and {url_b} ({describe(b)}) differ, but "
                        f"{table.ROUTER_VERSION} spreads requests over a role's workers evenly (no per-worker "
                        f"weight): the smaller one queues while the other idles",
                fix=f"{role} workers alike (one layout and one {f['max_num_seqs']}), or a router per kind"))
    return out


def _unlike_servers(table, served: list) -> list[Violation]:
    """`router_unlike_servers` (warning): aggregated servers of the file behind one regular-mode router
    (ROUTER_FLAG["workers"]) that differ in layout or in the sequences they run at once. The router gives each of its n
    servers about 1 / n of the requests (round_robin, random; the load-aware policies even out the requests in
    flight, not each server's capacity: `planner.serve.ROUTER_SPLIT`), so a server of less capacity (fewer GPUs, a
    smaller batch) is loaded beyond it while the others have room (fresh-user review 9, finding 1: 1 x tp2 @17 +
    4 x tp4 @38 behind round-robin ran the tp2 server at ~190%). Servers in other files or on other hosts are not
    seen: check reads one file, and nothing in a launch file says two files' servers share a router."""
    kinds: dict = {}
    for route, _, launch in served:
        kinds.setdefault((launch.inst, launch.max_num_seqs), []).append(route.url)
    if len(kinds) < 2:
        return []
    f, n = table.FLAG, sum(len(urls) for urls in kinds.values())
    listed = "; ".join(f"{len(urls)} x {inst.label} ({inst.gpus} GPU{'s' * (inst.gpus > 1)}), {f['max_num_seqs']} "
                       f"{seqs or 'default'}: {', '.join(urls)}" for (inst, seqs), urls in kinds.items())
    return [Violation(
        rule="router_unlike_servers", severity="warning",
        message=f"{n} servers of {len(kinds)} kinds behind one {table.ROUTER_VERSION} ({listed}): the router has no "
                f"per-server weight, so each gets about 1/{n} of the requests and a smaller one is loaded beyond what "
                f"it carries while the larger ones have room",
        fix=f"servers alike behind one router (one layout and one {f['max_num_seqs']}: `planner serve-plan ... "
            f"--request-rate R` plans them), or a router per kind")]


def _sglang_rules(table, router: Router, pairs: list, workers: list) -> list[Violation]:
    """Roles, bootstrap ports and listening hosts of SGLang workers (`planner.frameworks.sglang.BOOTSTRAP_PORT`,
    `HOST`)."""
    f, rf, out = table.FLAG, table.ROUTER_FLAG, []
    bootstrap = {id(c): _literal(c.flags.get(f["bootstrap_port"]), table.BOOTSTRAP_PORT) for c, _ in workers}
    decode_ports = {bootstrap[id(c)] for c, launch in workers if launch.role == "decode"}
    shared: dict[tuple[str, int], str] = {}
    for route, c, launch in pairs:
        if launch.role != route.role:
            out.append(Violation(rule="router_role_mismatch",
                                 message=f"{rf[route.role]} {route.url} is a {f['disagg_mode']} {launch.role} worker",
                                 fix=f"{rf[launch.role]} {route.url}"))
            continue
        host = c.flags.get(f["host"], table.HOST)
        if route.host not in LOOPBACK and host in LOOPBACK:
            out.append(Violation(
                rule="worker_unreachable",
                message=f"the router reaches {route.url}, but the worker listens on {host} only "
                        f"({f['host'] + ' ' + host if f['host'] in c.flags else 'SGLang default ' + f['host']}), "
                        f"which neither the router nor the workers of other hosts reach",
                fix=f"{f['host']} {table.ANY_HOST}"))
        if route.role != "prefill":
            continue
        own = bootstrap[id(c)]
        given = route.bootstrap if route.bootstrap and route.bootstrap.lower() != "none" else None
        used = {int(given)} if given and given.isdigit() else decode_ports
        wrong = sorted(p for p in used if p is not None and own is not None and p != own)
        if wrong:
            how = (f"the router passes {rf['prefill']} {route.url} {given}" if given else
                   f"the router passes no bootstrap port, so the decode workers use their own {f['bootstrap_port']} "
                   f"{', '.join(map(str, wrong))}")
            out.append(Violation(
                rule="bootstrap_port_mismatch",
                message=f"{how}, but the prefill worker's bootstrap server listens on {own}: decode workers do not "
                        f"find the KV cache of its requests", fix=f"{rf['prefill']} {route.url} {own}"))
        free = max([p for h, p in shared if h == route.host] + [own or 0]) + 1
        if own is not None and (route.host, own) in shared and shared[(route.host, own)] != route.url:
            out.append(Violation(
                rule="bootstrap_port_conflict",
                message=f"the prefill workers {shared[(route.host, own)]} and {route.url} run on one host with one "
                        f"bootstrap port {own}: the second cannot bind it",
                fix=f"{f['bootstrap_port']} {free} on one of them, and the router's {rf['prefill']} URL {free}"))
        shared.setdefault((route.host, own), route.url)
    return out


def _vllm_rules(table, router: Router, pairs: list, workers: list) -> list[Violation]:
    """NIXL handshake ports and hosts of vLLM workers, and the router's connector
    (`planner.frameworks.vllm.SIDE_CHANNEL_PORT`, `CONNECTORS_OF_ROUTER`)."""
    f, rf, out = table.FLAG, table.ROUTER_FLAG, []
    connector = str(router.command.flags.get(rf["kv_connector"], table.ROUTER_CONNECTOR))
    known = {name for names in table.CONNECTORS_OF_ROUTER.values() for name in names}
    taken: dict[str, list[tuple[range, str]]] = {}
    runs = {route.url: _connector(c.flags.get(f["kv_transfer"])) for route, c, _ in pairs}
    other = {url: name for url, name in runs.items()
             if name in known and name not in table.CONNECTORS_OF_ROUTER.get(connector, ())}
    if other:
        fitting = sorted({k for k, names in table.CONNECTORS_OF_ROUTER.items() if set(other.values()) & set(names)})
        out.append(Violation(rule="router_kv_connector",
                             message=f"the router's {rf['kv_connector']} {connector}, but its workers run "
                                     f"{', '.join(sorted(set(other.values())))} ({', '.join(other)})",
                             fix=f"{rf['kv_connector']} {' or '.join(fitting)}"))
    for route, c, launch in pairs:
        base = _literal(c.env.get(table.SIDE_CHANNEL_PORT_ENV), table.SIDE_CHANNEL_PORT)
        if base is not None:
            ports = range(base, base + launch.inst.adp * launch.replicas)
            for used, url in taken.get(route.host, []):
                if url != route.url and set(ports) & set(used):
                    out.append(Violation(
                        rule="nixl_side_channel_conflict",
                        message=f"{url} and {route.url} run on one host with NIXL handshake ports {_span(used)} "
                                f"and {_span(ports)} ({table.SIDE_CHANNEL_PORT_ENV} + each data-parallel index): the "
                                f"second cannot bind them",
                        fix=f"{table.SIDE_CHANNEL_PORT_ENV}={used.stop} on {route.url}"))
            taken.setdefault(route.host, []).append((ports, route.url))
        advertised = c.env.get(table.SIDE_CHANNEL_HOST_ENV, table.SIDE_CHANNEL_HOST)
        remote = sorted({d.url for d, _, _ in pairs if d.role == "decode" and d.host != route.host})
        address = "ADDRESS (its host's, which the decode workers reach)" if route.host in LOOPBACK else route.host
        if route.role == "prefill" and remote and advertised in LOOPBACK:
            out.append(Violation(
                rule="nixl_side_channel_host",
                message=f"the prefill worker {route.url} advertises its NIXL handshake at {advertised} "
                        f"({table.SIDE_CHANNEL_HOST_ENV}{'' if table.SIDE_CHANNEL_HOST_ENV in c.env else ' unset'}), "
                        f"but its decode peer(s) {', '.join(remote)} run on another host: they connect to themselves",
                fix=f"{table.SIDE_CHANNEL_HOST_ENV}={address} on that worker"))
    return out


def _span(ports: range) -> str:
    return str(ports.start) if len(ports) == 1 else f"{ports.start}-{ports.stop - 1}"


def _connector(value) -> str | None:
    """The kv_connector of a KV-transfer config JSON (None: absent or not JSON)."""
    try:
        config = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return config.get("kv_connector") if isinstance(config, dict) else None
