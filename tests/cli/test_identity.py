"""Document identity of ``knowledge ingest`` (issue 37, item 3; `knowledge.cli.files`).

A file is the document at its real location (its resolved absolute path: the id versions before
0.2 gave), so two folders of the same name are two sets of documents, and the same file reached
another way is the same document. ``--as NAME`` / ``--root DIR`` name files by a logical key that
survives a moved folder — the keys 0.2 named every file by, so ``--as docs`` finds what 0.2
ingested from a folder named ``docs``; without them such a document is left alone, and a note says
how many files match one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from knowledge.cli.files import collect, document_id_for, document_identity, earlier_document_id, legacy_document_id
from tests.cli.test_cli import Cli, cli_runner

#: The same relative paths in two folders named ``docs``, with different words.
FILES = {
    "guide.md": "# Guide\n\nThe {word} deploy starts from the release tag.\n",
    "ops/runbook.md": "# Runbook\n\n## Rollback\n\nPage the {word} team when the rollback fails.\n",
    "notes.txt": "The {word} cluster fails over at midnight.\n",
}


@pytest.fixture
def knowledge(capfd: pytest.CaptureFixture[str], database_dsn: str, tenant: str) -> Cli:
    return cli_runner(capfd, database_dsn, tenant)


def docs_folder(parent: Path, word: str) -> Path:
    root = parent / "docs"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text.format(word=word))
    return root


@pytest.fixture
def a_docs(tmp_path: Path) -> Path:
    return docs_folder(tmp_path / "a", "pelican")


@pytest.fixture
def b_docs(tmp_path: Path) -> Path:
    return docs_folder(tmp_path / "b", "heron")


def by_title(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["title"]: f for f in report["files"]}


def ids_of(report: dict[str, Any]) -> dict[str, str]:
    return {f["title"]: f["document_id"] for f in report["files"]}


def test_two_folders_with_the_same_name_are_two_document_sets(knowledge: Cli, a_docs: Path, b_docs: Path) -> None:
    first = knowledge("--json", "ingest", str(a_docs))
    second = knowledge("--json", "ingest", str(b_docs))
    assert first.code == second.code == 0, (first.err, second.err)
    assert first.json()["outcomes"] == second.json()["outcomes"] == {"ingested": 3}  # nothing is a new version
    assert set(ids_of(first.json()).values()).isdisjoint(ids_of(second.json()).values())
    assert sorted(ids_of(second.json())) == sorted(FILES)  # titles unchanged: the path inside the folder
    listed = knowledge("--json", "docs", "list").json()
    assert len(listed) == 6 and {d["version"] for d in listed} == {1}
    for word, folder in (("pelican", a_docs), ("heron", b_docs)):  # both searchable afterwards
        found = knowledge("--json", "search", f"{word} rollback team").json()["passages"]
        assert found and word in found[0]["text"], (word, found)
        assert found[0]["document_id"] in ids_of((first if folder == a_docs else second).json()).values()


def test_the_same_files_reached_another_way_are_unchanged(knowledge: Cli, a_docs: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    first = knowledge("--json", "ingest", str(a_docs)).json()
    assert first["outcomes"] == {"ingested": 3}
    ids = {Path(f["path"]).resolve(): f["document_id"] for f in first["files"]}
    (tmp_path / "link").symlink_to(a_docs, target_is_directory=True)
    (tmp_path / "guide-link.md").symlink_to(a_docs / "guide.md")
    monkeypatch.chdir(tmp_path / "a")
    ways = [
        (str(a_docs),),  # the same folder again
        ("docs",),  # a relative path
        ("./docs/../docs/ops",),  # a relative path to a subfolder
        (str(tmp_path / "a"),),  # a parent folder
        (str(tmp_path / "link"),),  # a symbolic link to the folder
        (str(a_docs / "notes.txt"), str(tmp_path / "guide-link.md")),  # files alone, one through a link
    ]
    for args in ways:
        report = knowledge("--json", "ingest", *args).json()
        assert set(report["outcomes"]) == {"unchanged"}, (args, report["outcomes"])
        for f in report["files"]:
            assert f["document_id"] == ids[Path(f["path"]).resolve()], (args, f)
    assert len(knowledge("--json", "docs", "list").json()) == 3


def test_the_default_identity_is_the_pre_0_2_id_of_the_real_location(a_docs: Path, tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(a_docs, target_is_directory=True)
    direct = {f.title: f for f in collect([a_docs])}
    linked = {f.title: f for f in collect([tmp_path / "link"])}
    for title, found in direct.items():
        assert found.key is None and found.real == (a_docs / title).resolve()
        assert document_identity("t", found) == legacy_document_id("t", a_docs / title)
        assert document_identity("t", linked[title]) == document_identity("t", found)
        assert found.folder_key == f"docs/{title}" and found.folder_as == "docs"
        assert earlier_document_id("t", found) == document_id_for("t", f"docs/{title}")
    (alone,) = collect([a_docs / "ops" / "runbook.md"])
    assert (alone.title, alone.folder_key, alone.folder_as) == ("runbook.md", "ops/runbook.md", "ops/runbook.md")
    named = {f.title: f.key for f in collect([a_docs], as_name="team/docs")}
    assert named == {title: f"team/docs/{title}" for title in FILES}
    assert [f.key for f in collect([a_docs / "guide.md"], as_name="guide")] == ["guide"]
    rooted = {f.title: f for f in collect([a_docs / "ops"], root=tmp_path)}
    assert rooted["runbook.md"].key == "a/docs/ops/runbook.md"
    assert earlier_document_id("t", rooted["runbook.md"]) is None  # a stated name: nothing to say about 0.2


def test_as_keeps_a_moved_folder_and_gives_the_ids_of_the_folder_name_keys(knowledge: Cli, a_docs: Path,
                                                                          tmp_path: Path, tenant: str) -> None:
    first = knowledge("--json", "ingest", str(a_docs), "--as", "docs").json()
    assert first["outcomes"] == {"ingested": 3}
    # The compatibility rule: --as docs on a folder named docs gives exactly the ids 0.2 gave.
    assert ids_of(first) == {title: str(document_id_for(tenant, f"docs/{title}")) for title in FILES}
    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    shutil.move(a_docs, moved)
    again = knowledge("--json", "ingest", str(moved), "--as", "docs/").json()  # (slashes at the ends dropped)
    assert again["outcomes"] == {"unchanged": 3} and ids_of(again) == ids_of(first)
    # --root the moved folder's parent names its files the same way once it is called docs again.
    shutil.move(moved, moved.parent / "docs")
    rooted = knowledge("--json", "ingest", str(moved.parent / "docs" / "ops"), "--root", str(moved.parent)).json()
    assert rooted["outcomes"] == {"unchanged": 1}
    assert rooted["files"][0]["document_id"] == ids_of(first)["ops/runbook.md"]
    (moved.parent / "docs" / "guide.md").write_text("# Guide\n\nThe pelican deploy now starts from main.\n")
    (changed,) = knowledge("--json", "ingest", str(moved.parent / "docs" / "guide.md"), "--as",
                           "docs/guide.md").json()["files"]
    assert (changed["outcome"], changed["version"], changed["document_id"]) == (
        "new_version", 2, ids_of(first)["guide.md"])
    assert len(knowledge("--json", "docs", "list").json()) == 3  # no second copy of anything


def test_root_names_files_by_their_path_from_it(knowledge: Cli, a_docs: Path, b_docs: Path, tmp_path: Path,
                                                tenant: str) -> None:
    report = knowledge("--json", "ingest", str(a_docs), str(b_docs / "guide.md"), "--root", str(tmp_path)).json()
    assert report["outcomes"] == {"ingested": 4}
    assert {f["document_id"] for f in report["files"]} == {
        str(document_id_for(tenant, key)) for key in
        ("a/docs/guide.md", "a/docs/ops/runbook.md", "a/docs/notes.txt", "b/docs/guide.md")}
    assert by_title(report)["ops/runbook.md"]["title"] == "ops/runbook.md"  # titles as without --root
    outside = knowledge("ingest", str(b_docs), "--root", str(a_docs))
    assert outside.code == 2 and "is not under" in outside.one_error_line()
    assert len(knowledge("--json", "docs", "list").json()) == 4  # the refused commands ingested nothing


def test_bad_naming_arguments_exit_2_with_one_line(knowledge: Cli, a_docs: Path, b_docs: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [
        (("ingest", str(a_docs), str(b_docs), "--as", "docs"), "--as names one"),
        (("ingest", str(a_docs), "--as", "docs", "--root", str(tmp_path)), "--as and --root"),
        (("ingest", "-", "--name", "x.md", "--as", "docs"), "--name"),
        (("ingest", "-", "--name", "x.md", "--root", str(tmp_path)), "--name"),
        (("ingest", str(a_docs), "--as", "/"), "--as takes a name"),
        (("ingest", str(a_docs), "--as", "docs/../x"), "--as takes a name"),
        (("ingest", str(a_docs), "--root", str(tmp_path / "nowhere")), "--root must be a folder"),
        (("ingest", str(a_docs), "--root", str(a_docs / "guide.md")), "--root must be a folder"),
    ]
    monkeypatch.setattr("sys.stdin", None)  # standard input is never read for a refused -
    for args, says in cases:
        result = knowledge(*args)
        assert result.code == 2, (args, result)
        assert says in result.one_error_line(), (args, result.err)
    assert "unknown tenant" in knowledge("docs", "list").one_error_line()  # nothing was ingested


def test_files_matching_documents_ingested_under_their_folder_name_get_a_note(
        knowledge: Cli, a_docs: Path, tenant: str) -> None:
    """What 0.2 ingested from a folder named docs (its ids: --as docs gives them again) is left
    alone by an ingest that names files by their location; a note says how many match, and --as
    docs makes them new versions of those instead."""
    old = knowledge("--json", "ingest", str(a_docs), "--as", "docs").json()  # as 0.2 named them
    (a_docs / "guide.md").write_text("# Guide\n\nThe pelican deploy starts from a signed tag.\n")
    human = knowledge("ingest", str(a_docs))
    assert human.code == 0 and "3 ingested" in human.out
    lines = human.out.splitlines()
    note = next(i for i, line in enumerate(lines) if line.startswith("note: "))
    assert note > next(i for i, line in enumerate(lines) if "3 ingested" in line)  # after the summary
    assert " ".join(lines[note].split()) == (
        "note: 3 files match documents an earlier version ingested under their folder's name (left as they "
        "were); ingest with --as docs to make them new versions of those instead")
    listed = {d["document_id"]: d["version"] for d in knowledge("--json", "docs", "list").json()}
    assert len(listed) == 6 and all(listed[i] == 1 for i in ids_of(old).values())  # the old ones untouched
    again = knowledge("--json", "ingest", str(a_docs)).json()  # now they are there: nothing to say
    assert again["outcomes"] == {"unchanged": 3} and again["folder_name_matches"] == 0
    assert "note:" not in knowledge("ingest", str(a_docs)).out
    versions = knowledge("--json", "ingest", str(a_docs), "--as", "docs").json()
    assert versions["outcomes"] == {"new_version": 1, "unchanged": 2} and versions["folder_name_matches"] == 0
    assert by_title(versions)["guide.md"]["document_id"] == ids_of(old)["guide.md"]


def test_the_note_in_json_jsonl_and_for_a_file_given_alone(knowledge: Cli, a_docs: Path, tenant: str) -> None:
    other, third = f"{tenant}-2", f"{tenant}-3"
    assert knowledge("ingest", str(a_docs), "--as", "docs", tenant_id=other).code == 0
    as_json = knowledge("--json", "ingest", str(a_docs), tenant_id=other).json()
    assert as_json["outcomes"] == {"ingested": 3} and as_json["folder_name_matches"] == 3
    assert knowledge("ingest", str(a_docs), "--as", "docs", tenant_id=third).code == 0
    streamed = knowledge("--jsonl", "ingest", str(a_docs), tenant_id=third)
    records = [json.loads(line) for line in streamed.out.splitlines()]
    assert len(records) == 4 and records[-1]["folder_name_matches"] == 3 and records[-1]["exit_code"] == 0
    # A file given alone: 0.2 named it by its folder's name and its own.
    alone = a_docs / "ops" / "runbook.md"
    (first,) = knowledge("--json", "ingest", str(alone), "--as", "ops/runbook.md").json()["files"]
    assert first["document_id"] == str(document_id_for(tenant, "ops/runbook.md"))
    human = knowledge("ingest", str(alone))
    assert " ".join(human.out.split()).endswith(
        "note: 1 file matches a document an earlier version ingested under its folder's name (left as it "
        "was); ingest with --as ops/runbook.md to make it a new version of that document instead")
