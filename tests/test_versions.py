"""Release order of torch/transformers versions (PEP 440 through packaging), as the site orders
result sets: a dev build and a release candidate come before their release, not level with it."""

from enablebot.site.build import ResultSet, order_sets
from enablebot.versions import release_key

RELEASE_ORDER = ["5.26.0.dev0", "5.26.0rc1", "5.26.0", "5.26.1"]


def test_release_key_orders_dev_rc_release_and_patch():
    assert sorted(reversed(RELEASE_ORDER), key=release_key) == RELEASE_ORDER
    assert release_key("2.13.0+cu130") == release_key("2.13.0+cpu") == release_key("2.13.0")
    assert release_key("2.13.0.dev20261120+cpu") < release_key("2.13.0a0+git1f2e3d") < release_key("2.13.0")
    assert release_key("5.10.0") > release_key("5.9.1")  # numerically, not as text
    assert release_key("") == release_key("not-a-version") < release_key("0.0.1")


def test_site_orders_result_sets_by_release_not_by_label_or_start_time():
    # Labels and start times run against release order, so only the version key can get it right.
    sets = [ResultSet(label=f"s{i}", source=f"s{i}", kind="sweep", torch="2.13.0+cpu", transformers=v,
                      started_at=f"2026-11-2{9 - i}T00:00:00+00:00")
            for i, v in enumerate(RELEASE_ORDER)]
    assert [s.transformers for s in order_sets(list(reversed(sets)))] == RELEASE_ORDER
    assert [s.transformers for s in order_sets(sets)] == RELEASE_ORDER
    torch_first = [ResultSet(label="b", source="b", kind="sweep", torch="2.14.0rc1", transformers="5.0.0"),
                   ResultSet(label="a", source="a", kind="sweep", torch="2.14.0.dev20261101", transformers="6.0.0")]
    assert [s.torch for s in order_sets(torch_first)] == ["2.14.0.dev20261101", "2.14.0rc1"]
