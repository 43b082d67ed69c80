"""Where the driver listens and what it advertises (:mod:`streamscale.network`): settings
first, loopback for what runs on this machine, else the route to the master; table-driven,
with the route injected (no socket)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.network import (
    NetworkError,
    check_host,
    driver_addresses,
    master_hosts,
    on_this_machine,
    route_address,
)
from streamscale.settings import Settings, SettingsError


def fake_route(host: str, port: int) -> str:
    """The address this host would send from: a fixed one per network."""
    assert port > 0
    if host.startswith("198.18.0."):
        return "198.18.0.30"
    if host.startswith("10."):
        return "10.0.0.7"
    raise NetworkError(f"no route to {host}")


@pytest.mark.parametrize(
    ("master", "driver_host", "bind", "expected"),
    [
        ("local[4]", None, None, ("127.0.0.1", "127.0.0.1")),
        ("spark://127.0.0.1:7077", None, None, ("127.0.0.1", "127.0.0.1")),
        ("spark://localhost:7077", None, None, ("127.0.0.1", "127.0.0.1")),
        ("spark://198.18.0.2:7077", None, None, ("198.18.0.30", "198.18.0.30")),
        ("spark://10.1.2.3:7077,10.1.2.4:7077", None, None, ("10.0.0.7", "10.0.0.7")),
        ("spark://198.18.0.2:7077", "driver.example", None, ("driver.example",) * 2),
        ("spark://198.18.0.2:7077", "203.0.113.9", "0.0.0.0", ("203.0.113.9", "0.0.0.0")),
        ("spark://127.0.0.1:7077", "198.18.0.30", None, ("198.18.0.30", "198.18.0.30")),
        ("k8s://https://10.96.0.1:443", None, None, ("10.0.0.7", "10.0.0.7")),
    ],
)
def test_driver_addresses(
    master: str, driver_host: str | None, bind: str | None, expected: tuple[str, str]
) -> None:
    conf = driver_addresses(master, driver_host, bind, route=fake_route)
    assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == expected


def test_other_masters_get_no_address_unless_one_is_set() -> None:
    assert driver_addresses("yarn", route=fake_route) == {}
    assert driver_addresses("yarn", "10.0.0.7", route=fake_route)["spark.driver.host"] == (
        "10.0.0.7"
    )


def test_no_route_is_one_line_naming_the_setting() -> None:
    with pytest.raises(NetworkError, match="no route to 192.0.2.1"):
        driver_addresses("spark://192.0.2.1:7077", route=fake_route)


@pytest.mark.parametrize(
    ("master", "hosts"),
    [
        ("spark://a:7077", [("a", 7077)]),
        ("spark://a", [("a", 7077)]),
        ("spark://a:7077,b:7078", [("a", 7077), ("b", 7078)]),
        ("k8s://https://api.example:6443", [("api.example", 6443)]),
        ("k8s://api.example", [("api.example", 443)]),
        ("local[*]", []),
    ],
)
def test_master_hosts(master: str, hosts: list[tuple[str, int]]) -> None:
    assert master_hosts(master) == hosts


@pytest.mark.parametrize(
    ("master", "here"),
    [
        ("local", True),
        ("local[2]", True),
        ("spark://127.0.0.1:7077", True),
        ("spark://localhost:7077,127.0.0.1:7078", True),
        ("spark://127.0.0.1:7077,10.0.0.2:7077", False),
        ("spark://198.18.0.2:7077", False),
        ("k8s://https://10.96.0.1", False),
    ],
)
def test_on_this_machine(master: str, here: bool) -> None:
    assert on_this_machine(master) is here


@pytest.mark.parametrize("good", ["127.0.0.1", "198.18.0.2", "::1", "0.0.0.0", "driver-0.ns"])
def test_hosts_accepted(good: str) -> None:
    assert check_host(good, "X") == good


@pytest.mark.parametrize("bad", ["", "10.0.0.1:7077", "http://h", "a b", "300.1.1.1", "-h"])
def test_hosts_refused_in_one_line(bad: str) -> None:
    with pytest.raises(NetworkError, match="^X=.*not an IP address") as info:
        check_host(bad, "X")
    assert "\n" not in str(info.value)


@given(st.ip_addresses(v=4))
def test_every_ipv4_address_is_a_host(address: object) -> None:
    assert check_host(str(address), "X") == str(address)


def test_settings_validate_the_driver_addresses() -> None:
    assert Settings(driver_host="198.18.0.30").driver_host == "198.18.0.30"
    with pytest.raises(SettingsError, match="STREAMSCALE_DRIVER_HOST.*not an IP address"):
        Settings(driver_host="10.0.0.1:4040")
    with pytest.raises(SettingsError, match="STREAMSCALE_DRIVER_BIND_ADDRESS"):
        Settings(driver_bind_address="0.0.0.0:4040")


def test_settings_read_the_driver_host_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMSCALE_DRIVER_HOST", "10.0.0.7")
    assert Settings().driver_host == "10.0.0.7"


def test_the_route_to_loopback_is_loopback() -> None:
    # A UDP connect() sends nothing and opens no connection: no process is started.
    assert route_address("127.0.0.1", 7077) == "127.0.0.1"
