"""The public face (`knowledge/__init__.py`), held as trio holds its own (``_tests/test_exports.py``):
every exported name resolves to what its module defines, type checkers see the same names, importing
the package is cheap, every error class lives in `knowledge.errors` and is exported, and the README's
examples import from the package alone."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import knowledge
from knowledge.errors import KnowledgeError
from tests.helpers.modules import all_modules

ROOT = Path(__file__).resolve().parents[1]


def test_every_exported_name_resolves_to_its_modules_definition() -> None:
    assert knowledge.__all__ == sorted(set(knowledge.__all__))
    for name in knowledge.__all__:
        value = getattr(knowledge, name)
        if name == "__version__":
            assert isinstance(value, str) and value
            continue
        assert not name.startswith("_")
        assert value is getattr(importlib.import_module(knowledge._EXPORTS[name]), name)
    assert set(knowledge.__all__) <= set(dir(knowledge))
    with pytest.raises(AttributeError):
        knowledge.no_such_name  # noqa: B018


def test_type_checkers_see_exactly_the_exported_names() -> None:
    """The ``TYPE_CHECKING`` block imports each exported name from the module `_EXPORTS` names."""
    tree = ast.parse(Path(knowledge.__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
    seen = {alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom)
            for alias in node.names}
    assert seen == knowledge._EXPORTS


def test_importing_the_package_imports_nothing_heavy() -> None:
    """``import knowledge`` loads no dependency and no other module of ours: the console script
    relies on it to install its signal handlers first."""
    code = ("import sys, knowledge; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'knowledge', 'asyncpg', 'trio', 'anyio', 'pydantic', 'typer', 'rich'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "['knowledge']"


def test_every_error_class_is_defined_in_knowledge_errors_and_every_public_one_exported() -> None:
    defined_elsewhere = []
    for module in all_modules():
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__ \
                    and module.__name__ != "knowledge.errors":
                defined_elsewhere.append(f"{module.__name__}.{name}")
    # Control flow inside one module (never raised to a caller) may stay where it is used.
    private = {"knowledge.cli.signals.Interrupted", "knowledge.cli.context.CliError",
               "knowledge.cli.ingest_cmd.IngestCut", "knowledge.ingest.bulk._GroupRefused",
               "knowledge.parsers.pdf_extract.PdfRefused", "knowledge.parsers.pdf_extract._Repairable",
               # the parser child's own refusals, sent to the pool as results (reason, message)
               "knowledge.parsers.html_extract.HtmlRefused", "knowledge.parsers.docx_package.DocxRefused",
               "knowledge.parsers.refusal.Refused", "knowledge.ingest.ingestor._Unsupported",
               # handed to the MCP SDK over the read stream (it answers a parse error), never raised
               "knowledge.mcp.stdio.LineTooLong"}
    assert sorted(set(defined_elsewhere) - private) == []
    from knowledge import errors

    public = {name for name, obj in vars(errors).items()
              if inspect.isclass(obj) and issubclass(obj, KnowledgeError) and not name.startswith("_")}
    assert public - set(knowledge.__all__) == {"NotARegularFile"}  # the CLI's own refusal


def test_the_readmes_examples_import_from_the_package_alone() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"```python\n(.*?)```", readme, re.DOTALL))
    imports = re.findall(r"^\s*(?:from|import) (knowledge\S*)", code, re.M)
    assert imports and set(imports) == {"knowledge"}


#: `KnowledgeService`'s public surface, pinned: the documented methods, the read-only facts and the one
#: seam (`faults`). A name added or removed is a change of the host's API: make it here on purpose.
FACADE = {
    # opening, health, the service's own task group
    "open", "health", "start_background", "settings", "dsn", "faults",
    # sources
    "put_artifact", "artifact_ref", "read_artifact", "expire_artifacts", "sweep_artifacts",
    # ingest, versions, deletion
    "ingest", "ingest_many", "rechunk", "reextract", "chunker_for", "delete", "inspect_pdf", "count_refusal",
    # retrieval and citations
    "search", "retrieval", "get_chunk", "operator_get_chunk", "operator_resolve_citation",
    # the semantic arm
    "semantic_version", "semantic_ready", "reembed", "wait_embedded", "embedding_backlog", "queued_for",
    # the operator's catalog and metrics
    "documents", "document", "document_summaries", "document_versions", "document_ids_starting", "tenants",
    "tenant_known", "corpus_size", "passages_given", "ingest_stats", "ingest_trend", "citation_stats",
    "budget_pressure",
    # turns, tool calls, answers, traces
    "turn", "tool_search", "record_answer", "operator_trace", "trace_view", "operator_trace_view", "check_trace",
    "prune_traces",
    # attachments and the maintenance worker
    "upload_attachment", "mark_attachments", "attachment", "attachment_overview", "delete_conversation",
    "worker_status", "worker_snapshot",
}
#: The read-only facts: properties without a setter.
FACTS = {"settings", "dsn", "faults", "semantic_version"}


def test_the_service_is_a_closed_facade_whose_surface_is_pinned() -> None:
    """Its public names are exactly `FACADE`; every attribute its constructor sets is private; the facts
    cannot be assigned; and every public coroutine method declares its policy (a task of the service or
    not; retried, typed or its own) once, on its definition (``knowledge.service.policy.policy``)."""
    from knowledge.service import KnowledgeService

    assert {name for name in dir(KnowledgeService) if not name.startswith("_")} == FACADE
    init = next(node for node in ast.walk(ast.parse(inspect.getsource(KnowledgeService)))
                if isinstance(node, ast.FunctionDef) and node.name == "__init__")
    assigned = {target.attr for node in ast.walk(init) if isinstance(node, ast.Assign | ast.AnnAssign)
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Attribute)}
    assert assigned and all(name.startswith("_") for name in assigned), sorted(assigned)
    for name in FACTS:
        fact = inspect.getattr_static(KnowledgeService, name)
        assert isinstance(fact, property) and fact.fset is None, name
    undeclared = [name for name in FACADE - FACTS - {"open"}
                  if inspect.iscoroutinefunction(getattr(KnowledgeService, name))
                  and not hasattr(getattr(KnowledgeService, name), "__knowledge_policy__")]
    assert undeclared == []
    policies = {name: getattr(KnowledgeService, name).__knowledge_policy__ for name in FACADE - FACTS
                if hasattr(getattr(KnowledgeService, name), "__knowledge_policy__")}
    # The writes and whatever holds a child run as tasks of the service; the reads are retried.
    assert all(policies[name][0] for name in ("ingest", "ingest_many", "rechunk", "delete", "inspect_pdf", "turn",
                                              "tool_search", "record_answer", "delete_conversation", "search"))
    assert all(policies[name] == (False, "retry") for name in ("documents", "document", "get_chunk", "tenants",
                                                               "ingest_stats", "citation_stats", "trace_view"))
