"""The dashboard in a real browser: Debian's Chromium, headless, driven by Selenium.

A real ``kameleon serve`` with an API key; sessions driven by the Python client; the
dashboard opened as a user would (the key typed into its form once). Checks that the
sessions list shows them, that a session's trace plot has one series per chain and
grows as the client steps, that a session whose chains disagree shows its R-hat
warning, that the API explorer renders, and that no page asks any host but the
service's own (the browser's network log, and the dashboard's own CSP header).

Skipped when Chromium or its driver is missing, except under CI (``CI=true``), where
``.ci/run`` installs them and their absence is a failure. Screenshots go to
``KAMELEON_SCREENSHOTS`` when set (the README's are made so: ``KAMELEON_SCREENSHOTS=docs``),
else to the test's temporary directory.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from kameleon import Client
from tests.servers import KAMELEON, free_port, serving

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
KEY = "dashboard-test-key"

pytestmark = pytest.mark.slow


def _browser_or_skip() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        message = f"no {', '.join(missing)}: apt-get install chromium chromium-driver"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI needs a browser for the dashboard's tests: " + message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def serve_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dashboard") / "serve.log"


@pytest.fixture(scope="module")
def service(serve_log: Path) -> Iterator[str]:
    from kameleon.service.config import hash_api_key

    _browser_or_skip()
    port = free_port()
    env = {
        "KAMELEON_PORT": str(port),
        "KAMELEON_HOST": "127.0.0.1",
        "KAMELEON_STORE": "memory",
        "KAMELEON_API_KEY_HASHES": json.dumps([hash_api_key(KEY)]),
    }
    with serving([KAMELEON, "serve"], env, port, log=serve_log) as url:
        yield url


@pytest.fixture(scope="module")
def client(service: str) -> Iterator[Client]:
    with Client(service, api_key=KEY) as c:
        yield c


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("KAMELEON_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser(service: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


# ------------------------------------------------------------------------ helpers


def standard_normal(x: list[float]) -> float:
    return -0.5 * sum(v * v for v in x)


def two_far_modes(x: list[float]) -> float:
    """Two narrow modes at -8 and +8 on every axis: a random walk never crosses."""
    near = min(sum((v - m) ** 2 for v in x) for m in (-8.0, 8.0))
    return -0.5 * near / 0.25


class Driven:
    """A session stepped by the client through a log density."""

    def __init__(self, client: Client, log_density: Callable[[list[float]], float], **create: Any):
        self.client = client
        self.log_density = log_density
        self.id = client.create_session(**create).id
        self.proposals = client.ask(self.id, max=create.get("chains", 1)).proposals

    def steps(self, n: int) -> None:
        for _ in range(n):
            results = [(p.id, self.log_density(p.x)) for p in self.proposals]
            answer = self.client.step(self.id, results)
            self.proposals = answer.proposals
            if answer.done:
                return


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def requested_urls(browser: Any) -> list[str]:
    """Every URL the browser asked for since the last call (its network log)."""
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def foreign(urls: list[str], service: str) -> list[str]:
    own = urlsplit(service).netloc
    return [
        u for u in urls if urlsplit(u).scheme not in ("data", "blob") and urlsplit(u).netloc != own
    ]


def console_errors(browser: Any, expected: str = "\0") -> list[str]:
    """The console's errors (a CSP violation is one), but those that say ``expected``."""
    logs = browser.get_log("browser")
    return [e["message"] for e in logs if e["level"] == "SEVERE" and expected not in e["message"]]


def screenshot(browser: Any, path: Path) -> None:
    """The whole page, not only the window: the window made as tall as the page."""
    width = browser.get_window_size()["width"]
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(width, min(3000, max(360, int(height) + 140)))
    time.sleep(0.5)  # the plots redraw at their new size
    browser.save_screenshot(str(path))
    browser.set_window_size(width, 1000)


def cells(browser: Any, session_id: str) -> list[str]:
    """The texts of a session's row in the list (empty strings while it is not there)."""
    texts: list[str] = browser.execute_script(
        "const row = document.querySelector(`tr[data-session='${arguments[0]}']`);"
        "return row ? [...row.cells].map((c) => c.textContent) : [];",
        session_id,
    )
    return texts or [""] * 10


def attribute(browser: Any, css: str, name: str) -> list[str]:
    """The attribute ``name`` of every element ``css`` selects, read in one call (the
    pages redraw at every poll: an element found in one call may be gone in the next)."""
    values: list[str] = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map((e) => e.getAttribute(arguments[1]) || '');",
        css,
        name,
    )
    return values


def texts(browser: Any, css: str) -> list[str]:
    """The text of every element ``css`` selects, read in one call."""
    values: list[str] = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent);", css
    )
    return values


# -------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def converging(client: Client) -> Driven:
    run = Driven(
        client,
        standard_normal,
        dim=3,
        chains=4,
        algorithm="am",
        seed=1,
        warmup=200,
        param_names=["alpha", "beta", "gamma"],
    )
    run.steps(1000)
    return run


@pytest.fixture(scope="module")
def stuck(client: Client) -> Driven:
    initial = [[-8.0, -8.0], [-8.0, -8.0], [8.0, 8.0], [8.0, 8.0]]
    run = Driven(
        client, two_far_modes, dim=2, chains=4, algorithm="rwm", seed=2, warmup=20, initial=initial
    )
    run.steps(200)
    client.diagnostics(run.id)  # the summary then carries the latest warnings
    return run


def test_serve_prints_the_dashboard_url(service: str, serve_log: Path) -> None:
    assert f"dashboard at {service}/ui" in serve_log.read_text()


def test_the_dashboard_lists_sessions_behind_the_api_key(
    service: str, browser: Any, converging: Driven, stuck: Driven, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    page = httpx.get(service + "/ui")
    assert page.status_code == 200
    assert "default-src 'self'" in page.headers["content-security-policy"]
    requested_urls(browser)  # start afresh
    browser.get(service + "/ui")
    form = wait_until(lambda: browser.find_element(By.ID, "key-form").is_displayed(), "key form")
    assert form
    browser.find_element(By.ID, "key-input").send_keys(KEY)
    browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
    for run in (converging, stuck):
        wait_until(
            lambda run=run: browser.find_elements(By.CSS_SELECTOR, f'tr[data-session="{run.id}"]'),
            f"session {run.id} in the list",
        )
    # The rows are redrawn at every poll: read a row's cells afresh, in one call.
    wait_until(lambda: "rhat" in cells(browser, stuck.id)[8], "the stuck session's rhat warning")
    wait_until(lambda: cells(browser, converging.id)[6] != "–", "the converging session's R-hat")
    stuck_cells = wait_until(lambda: cells(browser, stuck.id), "the stuck session's row")
    assert stuck_cells[1] == "rwm" and stuck_cells[3] == "4 × 2"
    rhat = wait_until(lambda: cells(browser, stuck.id)[6].replace("–", ""), "its R-hat")
    assert rhat == "∞" or float(rhat) > 1.1, rhat
    # Filtering and sorting.
    browser.find_element(By.ID, "filter").send_keys("rwm")
    wait_until(
        lambda: len(browser.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")) == 1, "filtered"
    )
    browser.find_element(By.ID, "filter").clear()
    browser.find_element(By.CSS_SELECTOR, 'th[data-key="iterations"]').click()
    ids = attribute(browser, "#sessions tbody tr", "data-session")
    assert ids.index(converging.id) < ids.index(stuck.id)  # most iterations first
    screenshot(browser, shots / "dashboard-sessions.png")
    assert foreign(requested_urls(browser), service) == []
    # The first request, before the key was typed in, was refused.
    assert console_errors(browser, expected="401 (Unauthorized)") == []
    assert browser.execute_script("return sessionStorage.getItem('kameleon-api-key')") == KEY


def test_a_session_page_plots_one_series_per_chain_and_grows(
    service: str, browser: Any, converging: Driven, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    requested_urls(browser)
    browser.get(f"{service}/ui/sessions/{converging.id}")  # the key is kept: no form
    wait_until(
        lambda: len(browser.find_elements(By.CSS_SELECTOR, ".trace-plot[data-points]")) == 3,
        "trace plots",
    )
    assert attribute(browser, ".trace-plot", "data-series") == ["4", "4", "4"]
    assert attribute(browser, ".trace-plot", "data-param") == ["0", "1", "2"]
    before = int(attribute(browser, ".trace-plot", "data-points")[0])
    iterations = httpx.get(
        f"{service}/v1/sessions/{converging.id}", headers={"X-API-Key": KEY}
    ).json()["chain_summaries"][0]["iterations"]
    assert 250 <= before <= iterations  # at most 1000 points: every draw, or every 2nd
    last = int(attribute(browser, ".trace-plot", "data-last")[0])
    assert iterations - 4 < last <= iterations
    converging.steps(150)
    wait_until(
        lambda: int(attribute(browser, ".trace-plot", "data-last")[0]) > last + 100,
        "the trace to grow after more steps",
    )
    assert attribute(browser, ".trace-plot", "data-series") == ["4", "4", "4"]
    # Running R-hat and ESS, acceptance per chain, histograms, the diagnostics table.
    assert int(attribute(browser, "#running-rhat", "data-points")[0]) >= 2
    assert len(browser.find_elements(By.CSS_SELECTOR, "#acceptance .bar-row")) == 4
    assert len(browser.find_elements(By.CSS_SELECTOR, "#histograms canvas")) == 3
    names = wait_until(lambda: texts(browser, "#diagnostics tbody tr td:first-child"), "table")
    assert names == ["alpha", "beta", "gamma"]
    assert not browser.find_element(By.ID, "error").is_displayed()
    time.sleep(1.0)  # let the last poll draw
    screenshot(browser, shots / "dashboard-session.png")
    assert foreign(requested_urls(browser), service) == []
    assert console_errors(browser) == []


def test_a_session_whose_chains_disagree_shows_its_rhat_warning(
    service: str, browser: Any, stuck: Driven, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    requested_urls(browser)
    browser.get(f"{service}/ui/sessions/{stuck.id}")
    box = wait_until(
        lambda: [e for e in browser.find_elements(By.ID, "warnings") if e.is_displayed()],
        "the warnings box",
    )[0]
    codes = attribute(browser, "#warning-list li", "data-code")
    assert "rhat" in codes, codes
    assert "R-hat" in box.text or "rhat" in box.text
    wait_until(
        lambda: browser.find_elements(By.CSS_SELECTOR, "#diagnostics td.bad"), "a bad R-hat cell"
    )
    wait_until(
        lambda: attribute(browser, ".trace-plot", "data-series") == ["4", "4"], "trace plots"
    )
    running = httpx.get(
        f"{service}/v1/sessions/{stuck.id}/trace", headers={"X-API-Key": KEY}
    ).json()["running"]
    assert all(v is None or v > 1.1 or math.isinf(v) for v in running["r_hat"][-1])
    screenshot(browser, shots / "dashboard-warning.png")
    assert foreign(requested_urls(browser), service) == []
    assert console_errors(browser) == []


def test_the_api_explorer_renders_from_packaged_files(service: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    requested_urls(browser)
    browser.get(service + "/v1/docs")
    title = wait_until(
        lambda: browser.find_elements(By.CSS_SELECTOR, ".swagger-ui .info .title"), "Swagger UI"
    )
    assert "Kameleon" in title[0].text
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, ".opblock"), "the operations")
    urls = requested_urls(browser)
    assert any(u.endswith("/v1/docs/assets/swagger-ui-bundle.js") for u in urls)
    assert foreign(urls, service) == []
