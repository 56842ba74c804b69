"""The designers' console in a real browser: headless Chromium driven by Selenium against a bridge
on loopback. One bridge and one browser serve the whole module; each scenario saves a screenshot
in its temporary folder. Skipped, saying how to install one, where no Chromium is found (a failure
under CI=true)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.model import UpstreamTool
from tests.browser import headless_chromium, require_chromium
from tests.fakes import FakeUpstream, tool
from tests.serve.console_env import ThreadedBridge

TOKEN = "token-of-the-designer"
TOKEN_NARROW = "token-of-the-narrow-surface"
HIDDEN = ("crm__secret_export", "vault__read_secret")  # what the narrow surface's rules hide

CONFIG = {
    "store": {"path": ":memory:"},
    "server": {
        "tokens": [
            {"token": TOKEN, "surface": "default", "name": "designer"},
            {"token": TOKEN_NARROW, "surface": "narrow", "name": "partner"},
        ]
    },
    "surfaces": [
        {"name": "default"},
        {"name": "narrow", "block": ["*secret*", {"upstream": "vault"}]},
    ],
}


def order_tool(quantity: dict[str, Any] | None = None) -> UpstreamTool:
    props: dict[str, Any] = {"order_id": {"type": "string", "description": "The order."}}
    if quantity is not None:
        props["quantity"] = quantity
    return tool("update_order", props=props, required=["order_id"])


def crm_tools(quantity: dict[str, Any] | None = None) -> list[UpstreamTool]:
    mapping = {"protocol": "mcp", "server": "crm-mcp-server", "tool_name": "find_customer"}
    return [
        tool(
            "find_customer",
            read_only=True,
            tags=["crm"],
            description="Find a customer by name or e-mail address.",
            native_id="crm-native-find-customer-7",
            external_mapping=mapping,
            output_schema={"type": "object", "properties": {"echo": {"type": "object"}}},
        ),
        tool(
            "ask_user",
            description="Ask the account owner a question.",
            blocked_reason="credential_missing",
            blocked_detail="the CRM needs the user's own credential: connect it in the vault",
        ),
        tool("secret_export", description="Export every customer's records."),
        order_tool(),
    ]


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[ThreadedBridge, FakeUpstream]]:
    require_chromium()
    crm = FakeUpstream(name="crm", tools=crm_tools())
    billing = FakeUpstream(name="billing", tools=[tool("find_customer", read_only=True)])
    vault = FakeUpstream(name="vault", tools=[tool("read_secret", read_only=True)])
    with ThreadedBridge(CONFIG, [crm, billing, vault]) as served:
        yield served, crm


@pytest.fixture(scope="module")
def browser(world: tuple[ThreadedBridge, FakeUpstream]) -> Iterator[Any]:
    driver = headless_chromium()
    try:
        served = world[0]
        driver.get(f"{served.base}/ui")
        driver.execute_script(
            "sessionStorage.setItem(arguments[0], arguments[1])", "a2t-bridge-console-token", TOKEN
        )
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, found: Callable[[Any], Any], timeout: float = 10) -> Any:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # a page is made anew at each route: an element read mid-render may be gone the next moment
    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, timeout, poll_frequency=0.05, ignored_exceptions=ignored).until(
        found
    )


def visit(driver: Any, base: str, route: str) -> None:
    """Open a route and wait for its page drawn (the page notes the route of each it draws)."""
    url = f"{base}/ui#{route}"
    driver.execute_script(
        "const main = document.getElementById('main'); if (main) main.dataset.route = '';"
    )
    if driver.current_url == url:
        driver.refresh()
    else:
        driver.get(url)
    wait_for(
        driver,
        lambda d: (
            d.execute_script(
                "const main = document.getElementById('main');"
                "return document.readyState === 'complete' && main && main.dataset.route"
            )
            == f"#{route}"
        ),
    )


def text_of(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def shot(driver: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 1000


def test_search_finds_a_tool(world: Any, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    served, _ = world
    visit(browser, served.base, "/catalog")
    box = browser.find_element(By.ID, "q")
    box.send_keys("customer e-mail", Keys.ENTER)  # the keyboard alone
    wait_for(browser, lambda d: "Best matches" in text_of(d, "#catalog-count"))
    names = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".results .name")]
    assert names[0] == "crm__find_customer"
    # the same function from another upstream is named as its alternative
    assert "billing__find_customer" in text_of(browser, ".results li")
    assert browser.find_element(By.CSS_SELECTOR, "label[for=q]").text == "Search tools"
    shot(browser, tmp_path, "search")


def test_tool_page_shows_native_ids(world: Any, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    served, _ = world
    visit(browser, served.base, "/tool/crm__find_customer")
    native = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#native code.native")]
    assert "crm-native-find-customer-7" in native
    assert "crm-mcp-server" in native
    page = text_of(browser, "main")
    assert "Find a customer by name or e-mail address." in page
    facts = text_of(browser, "#about dl.facts:last-of-type").split("\n")
    assert facts[facts.index("read only") + 1].startswith("true")
    assert "billing__find_customer" in text_of(browser, "#alternatives")
    export = text_of(browser, "#export-openai-text")
    assert json.loads(export)["function"]["name"] == "crm__find_customer"
    assert TOKEN not in text_of(browser, "#export")
    shot(browser, tmp_path, "tool")


def test_changed_input_schema_shows_a_breaking_diff(
    world: Any, browser: Any, tmp_path: Path
) -> None:
    served, crm = world

    async def change() -> None:
        crm.change_tools(crm_tools(quantity={"type": "integer", "minimum": 1}))
        # the order tool's new required input makes version 2
        crm.change_tools(
            [
                *crm_tools()[:-1],
                tool(
                    "update_order",
                    props={"order_id": {"type": "integer"}, "quantity": {"type": "integer"}},
                    required=["order_id", "quantity"],
                ),
            ]
        )

    served.run(change)
    wait_for(
        browser,
        lambda d: (
            (decl := served.bridge.catalog.resolve("crm__update_order")) is not None
            and decl.version >= 2
        ),
    )
    visit(browser, served.base, "/tool/crm__update_order?from=1&to=2")
    wait_for(browser, lambda d: "Breaking change" in text_of(d, "#diff"))
    verdict = text_of(browser, "#diff-verdict")
    assert "from version 1 to 2" in verdict
    changes = text_of(browser, "#diff table")
    assert "input.order_id" in changes and "breaking" in changes
    assert "input.quantity" in changes and "a new required input" in changes
    shot(browser, tmp_path, "diff")


def test_try_it_shows_result_and_progress(world: Any, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    served, crm = world
    visit(browser, served.base, "/tool/crm__find_customer")
    field = browser.find_element(By.ID, "arg-text")
    field.send_keys("ada@example.com")
    browser.find_element(By.CSS_SELECTOR, "#try button[type=submit]").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "try-envelope"))
    envelope = json.loads(text_of(browser, "#try-envelope"))
    assert envelope["status"] == "succeeded"
    assert envelope["structured_content"] == {"echo": {"text": "ada@example.com"}}
    assert text_of(browser, "#try-progress") == "working · 50%"
    assert ("crm-native-find-customer-7", {"text": "ada@example.com"}) in crm.calls
    shot(browser, tmp_path, "try")


def test_blocked_tool_shows_its_reason(world: Any, browser: Any, tmp_path: Path) -> None:
    served, _ = world
    visit(browser, served.base, "/surface")
    assert "crm__ask_user\ncredential_missing" in text_of(
        browser, "main table"
    ) or "crm__ask_user credential_missing" in text_of(browser, "main table")
    visit(browser, served.base, "/tool/crm__ask_user")
    placement = text_of(browser, "#placement")
    assert "blocked" in placement and "credential_missing" in placement
    assert "connect it in the vault" in placement
    shot(browser, tmp_path, "blocked")


def test_another_surface_sees_no_hidden_tool(world: Any, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    served, _ = world
    recorder = served.recorder
    assert recorder is not None
    visit(browser, served.base, "/catalog")
    browser.find_element(By.XPATH, "//button[text()='Change token']").click()
    browser.find_element(By.ID, "token").send_keys(TOKEN_NARROW, Keys.ENTER)
    wait_for(browser, lambda d: "Surface narrow" in text_of(d, "#who"))
    pages = []
    for route in (
        "/catalog",
        "/catalog?q=secret",
        "/catalog?q=export records",
        "/catalog?placement=blocked",
        "/upstreams",
        "/surface",
        "/catalog?q=read",
        "/tool/crm__find_customer",
    ):
        visit(browser, served.base, route)
        pages.append(browser.page_source)
    assert "crm__find_customer" in pages[0]
    for page in pages:
        for hidden in HIDDEN:
            assert hidden not in page
    narrow = [e for e in recorder.exchanges if e.authorization == f"Bearer {TOKEN_NARROW}"]
    assert len(narrow) >= 8
    hidden_ids = [served.bridge.catalog.resolve(n).tool_id for n in HIDDEN]
    for exchange in narrow:
        for secret in (*HIDDEN, *hidden_ids, "secret_export", "read_secret"):
            assert secret.encode() not in exchange.body, (exchange.target, secret)
    # the browser's own log of its requests: none named a hidden tool either
    urls = [
        json.loads(entry["message"])["message"].get("params", {}).get("request", {}).get("url", "")
        for entry in browser.get_log("performance")
    ]
    assert any("/ui/api/catalog" in url for url in urls)
    assert not any(hidden in url for url in urls for hidden in (*HIDDEN, *hidden_ids))
    shot(browser, tmp_path, "narrow")


UNLABELLED = """
return [...document.querySelectorAll('input, select, textarea, button')].filter((el) => {
  if (el.getAttribute('aria-hidden') === 'true') return false;
  const named = el.getAttribute('aria-label') || (el.id && document.querySelector(`label[for="${el.id}"]`))
    || (el.tagName === 'BUTTON' && el.textContent.trim());
  return !named;
}).map((el) => el.outerHTML.slice(0, 80));
"""


def test_pages_read_at_phone_width_and_label_every_control(
    world: Any, browser: Any, tmp_path: Path
) -> None:
    served, _ = world
    browser.set_window_size(390, 844)
    try:
        for route, name in (
            ("/catalog", "phone-catalog"),
            ("/tool/crm__find_customer", "phone-tool"),
        ):
            visit(browser, served.base, route)
            # nothing wider than the screen: the page scrolls down, not sideways
            assert browser.execute_script(
                "return document.documentElement.scrollWidth <= window.innerWidth + 1"
            ), route
            assert browser.execute_script(UNLABELLED) == [], route
            shot(browser, tmp_path, name)
    finally:
        browser.set_window_size(1200, 900)
