"""Namespace / ServiceAccount -> v3 Profile and the default-allow profile
(``libcalico-go/lib/backend/k8s/conversion/conversion.go``,
``libcalico-go/lib/backend/k8s/resources/profile.go``)."""

from __future__ import annotations

import pytest

from trio_typha.model.k8s import (
    DEFAULT_ALLOW_PROFILE,
    DEFAULT_ALLOW_PROFILE_REVISION,
    ConversionError,
    default_allow_profile,
    namespace_to_profile,
    profile_revision,
    service_account_to_profile,
)

ALLOW = {"action": "Allow", "source": {}, "destination": {}}


def test_namespace_profile() -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": "prod", "uid": "11111111-2222-4333-8444-555555555555",
                       "resourceVersion": "500", "creationTimestamp": "2024-05-01T10:00:00Z",
                       "labels": {"team": "a", "kubernetes.io/metadata.name": "prod"},
                       "annotations": {"ignored": "yes"}}}
    profile = namespace_to_profile(ns)
    assert profile == {
        "kind": "Profile",
        "apiVersion": "projectcalico.org/v3",
        "metadata": {"name": "kns.prod", "uid": "88888888-4444-43cc-8422-aaaaaaaaaaaa",
                     "creationTimestamp": "2024-05-01T10:00:00Z"},
        "spec": {
            "ingress": [ALLOW],
            "egress": [ALLOW],
            "labelsToApply": {"pcns.kubernetes.io/metadata.name": "prod",
                              "pcns.projectcalico.org/name": "prod", "pcns.team": "a"},
        },
    }
    # Go marshals map keys sorted; the dict is built in that order.
    assert list(profile["spec"]["labelsToApply"]) == [
        "pcns.kubernetes.io/metadata.name", "pcns.projectcalico.org/name", "pcns.team"]
    assert profile_revision(ns["metadata"]["resourceVersion"], "") == "500/"


def test_namespace_name_label_cannot_be_spoofed() -> None:
    ns = {"metadata": {"name": "prod", "uid": "11111111-2222-4333-8444-555555555555",
                       "labels": {"projectcalico.org/name": "other"}}}
    assert namespace_to_profile(ns)["spec"]["labelsToApply"] == {
        "pcns.projectcalico.org/name": "prod"}


def test_service_account_profile() -> None:
    sa = {"metadata": {"name": "default", "namespace": "prod", "resourceVersion": "77",
                       "uid": "30316465-6365-4463-ad63-3564622d3638",
                       "creationTimestamp": "2024-05-02T08:30:00Z"}}
    assert service_account_to_profile(sa) == {
        "kind": "Profile",
        "apiVersion": "projectcalico.org/v3",
        "metadata": {"name": "ksa.prod.default", "uid": "0c8c26a6-c6a6-44c6-adc6-ac2646b46c1c",
                     "creationTimestamp": "2024-05-02T08:30:00Z"},
        "spec": {"labelsToApply": {"pcsa.projectcalico.org/name": "default"}},
    }
    assert profile_revision("", sa["metadata"]["resourceVersion"]) == "/77"


def test_service_account_labels_and_default_namespace() -> None:
    sa = {"metadata": {"name": "builder", "uid": "11111111-2222-4333-8444-555555555555",
                       "labels": {"role": "ci", "tier": "x"}}}
    profile = service_account_to_profile(sa)
    assert profile["metadata"]["name"] == "ksa.default.builder"
    assert profile["metadata"]["creationTimestamp"] is None
    assert profile["spec"] == {"labelsToApply": {
        "pcsa.projectcalico.org/name": "builder", "pcsa.role": "ci", "pcsa.tier": "x"}}


@pytest.mark.parametrize("uid", [None, "", "1234"])
def test_missing_or_bad_uid_fails(uid: str | None) -> None:
    meta = {"name": "x", "namespace": "y"}
    if uid is not None:
        meta["uid"] = uid
    with pytest.raises(ConversionError):
        namespace_to_profile({"metadata": meta})
    with pytest.raises(ConversionError):
        service_account_to_profile({"metadata": meta})


def test_default_allow_profile() -> None:
    assert DEFAULT_ALLOW_PROFILE == {
        "kind": "Profile",
        "apiVersion": "projectcalico.org/v3",
        "metadata": {"name": "projectcalico-default-allow", "creationTimestamp": None},
        "spec": {"ingress": [ALLOW], "egress": [ALLOW]},
    }
    assert DEFAULT_ALLOW_PROFILE_REVISION == "1"
    copy = default_allow_profile()
    assert copy == DEFAULT_ALLOW_PROFILE
    copy["spec"]["ingress"].clear()
    assert DEFAULT_ALLOW_PROFILE["spec"]["ingress"] == [ALLOW]
