"""A push of a followed version (a tag matching `tags`, a branch named in `refs`) starts a
run of its repository at the branch scheduled runs follow, whose fetch brings the version
in; a tag nobody follows is ignored. A real webhook server, a real Prefect server."""

from __future__ import annotations

import pytest

from hetriever.core.version_settings import VersionSpec
from tests.support.webhook_support import (
    SHA,
    push_payload,
    read_flow_run,
    running,
    send,
    webhook_config,
)

VERSIONS = {"hugo-docs": VersionSpec(refs=["release-0.139"], tags="v*", last=3)}


def pushed(ref: str) -> dict:
    return {**push_payload(), "ref": ref}


def test_a_spec_follows_tags_it_names_or_matches():
    spec = VERSIONS["hugo-docs"]
    assert spec.follows_tag("v0.140.0") and spec.follows_tag("release-0.139")
    assert not spec.follows_tag("nightly") and not spec.follows_tag("x-v1")


@pytest.mark.prefect
def test_a_followed_versions_push_starts_its_repositorys_run_and_other_tags_are_ignored(
    prefect_harness, ingest_deployment, tmp_path
):
    config = webhook_config(
        tmp_path / "state",
        prefect_harness.api_url,
        deployment=ingest_deployment,
        versions=VERSIONS,
    )
    with running(config) as base:
        for ref in ("refs/tags/v0.140.0", "refs/heads/release-0.139"):
            resp = send(base, pushed(ref))
            assert resp.status_code == 202, resp.text
            body = resp.json()
            assert body["status"] == "started" and body["ref"] == ref, body
            run = read_flow_run(body["flow_run_id"])
            # the repository with its versions, fetched at the branch it follows
            assert run.parameters["repositories"] == ["hugo-docs"]
            assert run.parameters["fetch"] is True and run.parameters["ref"] is None
            assert body["commit"] == SHA

        for ref in ("refs/tags/nightly", "refs/heads/release-0.138"):
            resp = send(base, pushed(ref))
            assert resp.status_code == 202 and resp.json()["status"] == "ignored", resp.text

        deleted = {**pushed("refs/tags/v0.141.0"), "deleted": True, "after": "0" * 40}
        assert send(base, deleted).json()["status"] == "ignored"
