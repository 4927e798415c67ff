"""`planner check` results in the formats CI reads: GitHub Actions workflow commands (annotations
on the pull request) and a JUnit XML test report (dashboards).

A result is `gate.evaluate`'s dict, or `{file, verdict: "error", error, line}` for a file that
could not be read (bad input, exit 2; line: of the key the error names, or None).

Sources: GitHub Actions "Workflow commands" (`::error file={name},line={line},title={title}::
{message}`; data escapes `%`, CR, LF as %25, %0D, %0A, properties also `:` and `,` as %3A, %2C:
actions/toolkit `packages/core/src/command.ts` escapeData / escapeProperty); JUnit XML as Jenkins
and GitHub test reporters read it (`<testsuites><testsuite><testcase classname name><failure
message type>`, `<error>` for a test that could not run, `<system-out>`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

SUITE = "planner check"
"""Name of the JUnit test suite and the title of an unreadable file's annotation."""
READ_CASE = "read"
"""JUnit test case of a file that could not be read."""
VERDICT_CASE = "verdict"
"""JUnit test case of a file's overall verdict (every rule applied)."""


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _text(violation: dict) -> str:
    fix = f" Fix: {violation['fix']}" if violation.get("fix") else ""
    return " ".join(f"{violation['message']}{fix}".split())


def github(results: list[dict]) -> list[str]:
    """One workflow command per finding (`::error` / `::warning`, at the line of the flag or key
    it names where known) and one plain summary line per file."""
    out = []
    for result in results:
        file = result["file"]
        if result["verdict"] == "error":
            where = f",line={result['line']}" if result.get("line") else ""
            out.append(f"::error file={_property(file)}{where},title={_property(SUITE)}::"
                       f"{_data(result['error'])}")
            out.append(f"ERROR {file}: could not be checked")
            continue
        for v in result["violations"]:
            where = f",line={v['line']}" if v.get("line") else ""
            out.append(f"::{'error' if v['severity'] == 'error' else 'warning'} "
                       f"file={_property(file)}{where},title={_property(v['rule'])}::"
                       f"{_data(_text(v))}")
        counts = [sum(v["severity"] == s for v in result["violations"]) for s in ("error", "warning")]
        out.append(f"{result['verdict'].upper()} {file} ({result['kind']}): {counts[0]} error(s), "
                   f"{counts[1]} warning(s)")
    return out


def junit(results: list[dict]) -> str:
    """A JUnit XML report: one `<testcase classname=FILE name=RULE>` per file x rule found (an
    error a `<failure>`, a warning passing with its text in `<system-out>`), one `verdict` case per
    file (failing when any rule failed) and a `read` case with an `<error>` for a file that could
    not be read."""
    suites = ET.Element("testsuites", name=SUITE)
    suite = ET.SubElement(suites, "testsuite", name=SUITE)
    tests = failures = error_count = 0
    for result in results:
        file = result["file"]
        if result["verdict"] == "error":
            case = ET.SubElement(suite, "testcase", classname=file, name=READ_CASE, file=file,
                                 **({"line": str(result["line"])} if result.get("line") else {}))
            ET.SubElement(case, "error", message=result["error"], type="bad input").text = \
                result["error"]
            tests, error_count = tests + 1, error_count + 1
            continue
        for v in result["violations"]:
            case = ET.SubElement(suite, "testcase", classname=file, name=v["rule"], file=file,
                                 **({"line": str(v["line"])} if v.get("line") else {}))
            if v["severity"] == "error":
                ET.SubElement(case, "failure", message=v["message"], type=v["rule"]).text = _text(v)
                failures += 1
            else:
                ET.SubElement(case, "system-out").text = f"warning: {_text(v)}"
            tests += 1
        case = ET.SubElement(suite, "testcase", classname=file, name=VERDICT_CASE, file=file)
        if result["verdict"] != "pass":
            errors = [v["rule"] for v in result["violations"] if v["severity"] == "error"]
            ET.SubElement(case, "failure", message=f"failed: {', '.join(errors)}", type="verdict")
            failures += 1
        tests += 1
    for element in (suites, suite):
        element.set("tests", str(tests))
        element.set("failures", str(failures))
        element.set("errors", str(error_count))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)
