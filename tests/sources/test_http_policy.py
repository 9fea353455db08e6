"""AddressPolicy: which resolved addresses may be connected to."""

from __future__ import annotations

import ipaddress

import pytest

from aioloader.sources._http_policy import (
    AddressPolicy,
    BlockedAddressError,
    as_policy,
    embedded_ipv4,
)


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("172.16.0.1", "private"),
        ("fc00::1", "private"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "reserved"),
    ],
)
def test_non_public_addresses_are_refused_by_default(address: str, kind: str) -> None:
    assert AddressPolicy().refusal("h", address) == f"h -> {address} is a {kind} address"


@pytest.mark.parametrize(
    ("address", "refusal"),
    [
        ("::ffff:7f00:1", "loopback address (IPv4-mapped, embeds 127.0.0.1)"),
        ("::ffff:a9fe:a9fe", "link-local address (IPv4-mapped, embeds 169.254.169.254)"),
        ("2002:7f00:1::1", "loopback address (6to4, embeds 127.0.0.1)"),
        ("2002:a9fe:a9fe::1", "link-local address (6to4, embeds 169.254.169.254)"),
        ("2002:c0a8:101:5::9", "private address (6to4, embeds 192.168.1.1)"),
        ("64:ff9b::7f00:1", "loopback address (NAT64, embeds 127.0.0.1)"),
        ("64:ff9b::a9fe:a9fe", "link-local address (NAT64, embeds 169.254.169.254)"),
        ("64:ff9b::a01:203", "private address (NAT64, embeds 10.1.2.3)"),
        # Teredo: the client's IPv4 is the bitwise NOT of the last 32 bits
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback address (Teredo, embeds 127.0.0.1)"),
        (
            "2001:0:4136:e378:8000:63bf:5601:5601",
            "link-local address (Teredo, embeds 169.254.169.254)",
        ),
        ("2001:0:4136:e378:8000:63bf:f5fe:fdfc", "private address (Teredo, embeds 10.1.2.3)"),
    ],
)
def test_ipv6_forms_that_embed_a_refused_ipv4_are_refused(address: str, refusal: str) -> None:
    assert AddressPolicy().refusal("h", address) == f"h -> {address} is a {refusal}"
    assert (
        AddressPolicy().literal_refusal(f"[{address}]") == f"{address} -> {address} is a {refusal}"
    )
    with pytest.raises(BlockedAddressError, match=r"embeds"):
        AddressPolicy().allowed("h", [address])


@pytest.mark.parametrize(
    ("address", "form", "ipv4"),
    [
        ("::ffff:5db8:d822", "IPv4-mapped", "93.184.216.34"),
        ("2002:5db8:d822::1", "6to4", "93.184.216.34"),
        ("64:ff9b::5db8:d822", "NAT64", "93.184.216.34"),
        ("2001:0:4136:e378:8000:63bf:a247:27dd", "Teredo", "93.184.216.34"),
    ],
)
def test_embedded_forms_are_judged_by_the_ipv4_they_reach(
    address: str, form: str, ipv4: str
) -> None:
    assert embedded_ipv4(ipaddress.ip_address(address)) == (form, ipaddress.IPv4Address(ipv4))
    assert AddressPolicy().refusal("h", address) is None  # a public IPv4 behind it passes
    loopback = {"IPv4-mapped": "::ffff:7f00:1", "6to4": "2002:7f00:1::",
                "NAT64": "64:ff9b::7f00:1", "Teredo": "2001::80ff:fffe"}[form]  # fmt: skip
    allowed = AddressPolicy(["127.0.0.0/8"])  # the allow list sees the embedded IPv4 too
    assert allowed.refusal("h", loopback) is None
    assert AddressPolicy().refusal("h", loopback) is not None


def test_addresses_without_an_embedded_ipv4_have_none() -> None:
    for address in ("127.0.0.1", "::1", "2606:2800:220:1:248:1893:25c8:1946", "2001:db8::1"):
        assert embedded_ipv4(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"])
def test_public_addresses_pass(address: str) -> None:
    assert AddressPolicy().refusal("example.com", address) is None


def test_the_allow_list_takes_networks_addresses_and_host_names() -> None:
    policy = AddressPolicy(["10.0.0.0/8", "127.0.0.1", "Files.Internal."])
    assert policy.refusal("a", "10.9.9.9") is None
    assert policy.refusal("a", "127.0.0.1") is None
    assert policy.refusal("files.internal", "192.168.1.1") is None
    assert policy.refusal("a", "127.0.0.2") == "a -> 127.0.0.2 is a loopback address"
    assert repr(policy) == "AddressPolicy(allow=['10.0.0.0/8', '127.0.0.1/32', 'files.internal'])"


def test_allowed_keeps_the_permitted_addresses_or_raises() -> None:
    policy = AddressPolicy()
    assert policy.allowed("h", ["127.0.0.1", "93.184.216.34"]) == ["93.184.216.34"]
    with pytest.raises(BlockedAddressError, match=r"h -> 127.0.0.1 is a loopback address"):
        policy.allowed("h", ["127.0.0.1"])


def test_literal_refusal_checks_ip_literals_only() -> None:
    policy = AddressPolicy()
    assert policy.literal_refusal("example.com") is None
    assert policy.literal_refusal("[::1]") == "::1 -> ::1 is a loopback address"
    assert policy.literal_refusal("169.254.169.254") == (
        "169.254.169.254 -> 169.254.169.254 is a link-local address"
    )


def test_bad_allow_lists_are_refused() -> None:
    with pytest.raises(TypeError, match="allow must be a sequence"):
        AddressPolicy("127.0.0.1")
    with pytest.raises(ValueError, match="allow entries must be CIDRs or host names but got ''"):
        AddressPolicy([""])
    assert as_policy(None).networks == ()
    given = AddressPolicy(["::1"])
    assert as_policy(given) is given


def test_literal_refusals_are_remembered_per_host_within_a_bound() -> None:
    from aioloader.sources import _http_policy

    policy = AddressPolicy(["10.0.0.0/8"])
    assert policy.literal_refusal("127.0.0.1") == "127.0.0.1 -> 127.0.0.1 is a loopback address"
    assert policy.literal_refusal("10.1.2.3") is None
    assert policy.literal_refusal("example.com") is None  # a name: checked once resolved
    assert policy.literal_refusal("127.0.0.1") == "127.0.0.1 -> 127.0.0.1 is a loopback address"
    for number in range(_http_policy.LITERALS_KEPT + 5):
        assert policy.literal_refusal(f"host{number}.test") is None
    assert len(policy._literals) <= _http_policy.LITERALS_KEPT
    assert policy.literal_refusal("[::1]") == "::1 -> ::1 is a loopback address"
