"""The encoder ranker's base model comes from configuration or the installed PyPI package (never a download),
and what it reads about a step: the instruction first, each candidate as a short sentence."""

from __future__ import annotations

from pathlib import Path

import pytest
from webenv import errors
from webenv.agent import encoder as enc
from webenv.agent.candidates import context, propose
from webenv.v1 import common_pb2

PAGES = Path(__file__).with_name("pages")


def test_base_model_from_the_package_extracted_once(tmp_path, monkeypatch):
    monkeypatch.delenv(enc.BASE_ENV, raising=False)
    monkeypatch.setenv(enc.CACHE_ENV, str(tmp_path / "cache"))
    path = enc.base_model_path()
    assert path == tmp_path / "cache" / enc.BASE_NAME and (path / "config.json").is_file()
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    stamp = (path / "config.json").stat().st_mtime_ns
    assert enc.base_model_path() == path and (path / "config.json").stat().st_mtime_ns == stamp, "extracted once"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [enc.BASE_NAME], "no staging folder left behind"


def test_configured_base_must_be_a_model_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(enc.BASE_ENV, str(tmp_path))
    with pytest.raises(errors.FailedPrecondition) as err:
        enc.base_model_path()
    assert enc.BASE_ENV in err.value.message and err.value.metadata["field"] == enc.BASE_ENV
    (tmp_path / "config.json").write_text("{}")
    assert enc.base_model_path() == tmp_path
    assert enc.base_model_path(tmp_path) == tmp_path, "an explicit path wins over the variable"


def test_texts_the_encoder_reads():
    obs = common_pb2.Observation(url="http://shop.web.test/books/the-quiet-harbor",
                                 axtree=(PAGES / "book.axtree").read_text())
    ctx = context("Who is the author of The Quiet Harbor?", obs, "", [("click(3)", "")], 1)
    text = enc.context_text(ctx)
    assert text.startswith("Who is the author of The Quiet Harbor? | page: books the quiet harbor. The Quiet Harbor")
    assert "done so far: click" in text and "seen: written by, price" in text
    lands: dict[int, str] = {}
    cands = propose(ctx)
    by_kind = {}
    for c in cands:
        by_kind.setdefault(c.answer_type or c.kind, enc.candidate_text(c, lands))
    author = next(c for c in cands if c.answer_type == "fact" and c.value == "Mara Ellison")
    assert enc.candidate_text(author, lands) == "answer written by: Mara Ellison"
    assert by_kind["click"].startswith("click link ") and "done" not in by_kind  # a question is answered
    told = context("Open the page of The Quiet Harbor.", obs, "", [], 1)
    done = next(c for c in propose(told) if c.answer_type == "done")
    assert enc.candidate_text(done, lands) == "answer done: the task is complete"
    assert by_kind["back"] == "go back to the previous page"
