"""The console in a real browser (tox env ``browser``): a real stack on free ports (redis-server,
the store, the retry service, the scheduler's worker and beat, the console) and Debian's
Chromium, headless, driven by selenium through Debian's chromedriver (no browser download).

Each test's pages are saved as PNGs under ``tests/browser/output/<test>/`` (or
``CLEPSYDRA_BROWSER_OUTPUT``); every page visit fails the test on a severe entry of the
browser's console (a JavaScript error, a resource that did not load, a blocked one)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tools.parts import Stack

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL_HINT = "install Debian's chromium and chromium-driver (make setup does, with apt as root)"
LEVELS = " ".join(["1s"] * 18)
"""Every delay level one second: the scenario's delays, retries and hand-overs stay short."""
OUTPUT = Path(os.environ.get("CLEPSYDRA_BROWSER_OUTPUT")
              or Path(__file__).parent / "output")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1400")


def _check_programs() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} not found: {INSTALL_HINT}")


@dataclass
class Browser:
    """One headless Chromium: ``visit`` a page (its console checked), ``shot`` a picture."""

    driver: Any
    base: str
    out: Path
    shots: list[Path] = field(default_factory=list)

    def visit(self, path: str) -> None:
        self.driver.get(self.base + path)
        self.check_console()

    def check_console(self) -> None:
        """Fail on any severe entry of the browser's console since the last check."""
        severe = [e for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert not severe, f"the browser's console has errors: {severe}"

    def shot(self, name: str) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"{len(self.shots) + 1:02d}-{name}.png"
        height = self.driver.execute_script("return document.body.scrollHeight")
        self.driver.set_window_size(1280, max(800, min(int(height) + 40, 4000)))
        assert self.driver.save_screenshot(str(path)), f"no screenshot {path}"
        self.shots.append(path)
        return path

    def click(self, css: str, then: str) -> None:
        """Click ``css`` (a submit button, a link) and wait until the next page shows ``then``
        (a click returns before the page it loads is there); then check the console."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.ui import WebDriverWait

        old = self.find("html")
        self.find(css).click()
        WebDriverWait(self.driver, 30).until(lambda _driver: _replaced(old))
        WebDriverWait(self.driver, 30).until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, then)))
        self.check_console()

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def text(self) -> str:
        return str(self.find("main").text)


@pytest.fixture(scope="session")
def chromium_driver() -> Iterator[Any]:
    """One Chromium for the whole env (about a second to start), a fresh profile directory."""
    _check_programs()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="clepsydra-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _replaced(element: Any) -> bool:
    """Whether ``element`` is gone from the page (the next page has replaced it). Asked while
    the document is being replaced, chromedriver may answer "Node with given id does not
    belong to the document" instead of a stale reference (seen once in CI, once in a
    ``make test`` here): that is gone too."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


def browser_for(driver: Any, base: str, request: pytest.FixtureRequest) -> Browser:
    """A Browser on ``base`` whose pictures go to the test's own output folder."""
    driver.delete_all_cookies()
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    out = OUTPUT / name
    shutil.rmtree(out, ignore_errors=True)
    driver.get("about:blank")
    driver.get_log("browser")  # start clean
    return Browser(driver, base, out)


def stack_with_console(home: Path, *, env: dict[str, str] | None = None,
                       retry_env: dict[str, str] | None = None,
                       scheduler_env: dict[str, str] | None = None,
                       **console_env: str) -> Stack:
    """Redis, store, retry, the scheduler's worker and beat, and the console (not started);
    ``env`` for every part, the others for one part each."""
    shared = {"CLEPSYDRA_DELAY_LEVELS": LEVELS, **(env or {})}
    return (Stack(home, env=shared).with_redis().with_store().with_retry(**(retry_env or {}))
            .with_scheduler(scheduler_env).with_console(**console_env))
