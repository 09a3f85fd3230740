"""The console with access control on (CLEPSYDRA_AUTH=on; DEC-console-viewer-role), in Debian's
headless Chromium over a real stack whose services check tokens too:

- no page shows data before a sign-in: each one sends the browser to ``/login``;
- a wrong token, and a token whose role is not viewer or admin, are refused at the sign-in;
- the session cookie is HttpOnly and Secure (Chromium keeps Secure cookies of http://127.0.0.1);
- a viewer sees every page and no action button (no cancel on a pending message, no DLQ
  selection); an admin sees them and may act;
- a POST without the session's CSRF token is refused and changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from selenium.webdriver.support.ui import WebDriverWait

from clepsydra_core.auth import Role
from clepsydra_core.auth_tokens import create_token
from clepsydra_core.runtime.http import HttpClient
from tests.browser.conftest import Browser, browser_for, stack_with_console
from tools.parts import Stack

pytestmark = pytest.mark.browser

PAGES = ("/", "/timers", "/groups", "/groups/billing", "/topics", "/topics/reminders", "/dlq",
         "/dlq/billing", "/dlq/billing/audit")
SECRET = "console-test-secret-0123456789-abcdefghij"


@dataclass
class AuthStack:
    stack: Stack
    tokens: dict[str, str]
    pending: str
    """A pending timer message's msgId."""


@pytest.fixture(scope="module")
def auth_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthStack]:
    root = tmp_path_factory.mktemp("console-auth")
    tokens_file = root / "secret" / "tokens.json"
    roles = {"admin": Role.ADMIN, "viewer": Role.VIEWER, "producer": Role.PRODUCER,
             "retry": Role.RETRY, "scheduler": Role.SCHEDULER}
    tokens = {name: create_token(tokens_file, name, role,
                                 topics=("*",) if role is Role.PRODUCER else ())[1]
              for name, role in roles.items()}
    env = {"CLEPSYDRA_AUTH": "on", "CLEPSYDRA_AUTH_TOKENS_FILE": str(tokens_file)}
    stack = stack_with_console(root, env=env,
                               retry_env={"CLEPSYDRA_TOKEN": tokens["retry"]},
                               scheduler_env={"CLEPSYDRA_TOKEN": tokens["scheduler"]},
                               CLEPSYDRA_CONSOLE_SECRET_KEY=SECRET)
    with stack.start():
        store = HttpClient(stack.store.url, service="store", token=tokens["admin"])
        store.post("/v1/topics", {"name": "reminders", "queues": 1})
        HttpClient(stack.retry.url, token=tokens["admin"]).put("/v1/groups/billing", {})
        sent = store.post("/v1/topics/reminders/messages", {
            "body": "later", "deliverAt": int(time.time() * 1000) + 3_600_000})
        yield AuthStack(stack, tokens, sent["msgId"])


@pytest.fixture
def browser(auth_stack: AuthStack, chromium_driver: Any,
            request: pytest.FixtureRequest) -> Browser:
    return browser_for(chromium_driver, auth_stack.stack.console.url, request)


def _sign_in(browser: Browser, token: str) -> None:
    browser.visit("/login")
    browser.find("#token").send_keys(token)
    browser.click("#sign-in", then="main")


def test_no_page_shows_data_before_sign_in(auth_stack: AuthStack, browser: Browser) -> None:
    for path in (*PAGES, f"/messages/{auth_stack.pending}"):
        browser.visit(path)
        assert browser.driver.current_url.startswith(browser.base + "/login"), path
        assert browser.find_all("#login-form") and not browser.find_all("#timeline"), path
        assert auth_stack.pending not in browser.text(), path  # (only in the form's "next")
        assert "reminders" not in browser.driver.page_source or path == "/topics/reminders"
    browser.shot("login")
    for token, why in (("clp_not-a-token", "not valid"),
                       (auth_stack.tokens["producer"], "role producer cannot sign in")):
        _sign_in(browser, token)
        assert why in browser.find("#login-error").text
    browser.shot("login-refused")


def test_a_viewer_sees_everything_and_no_action(auth_stack: AuthStack,
                                                browser: Browser) -> None:
    _sign_in(browser, auth_stack.tokens["viewer"])
    cookie = browser.driver.get_cookie("clepsydra_console")
    assert cookie is not None and cookie["httpOnly"] and cookie["secure"]
    browser.visit(f"/messages/{auth_stack.pending}")
    assert browser.find("#who").get_attribute("data-role") == "viewer"
    assert [h.get_attribute("data-kind") for h in browser.find_all("#timeline li.hop")] == \
        ["produced", "parked"]
    assert not browser.find_all("#actions") and not browser.find_all("#cancel")
    browser.shot("viewer-message")
    browser.visit("/dlq/billing")
    assert not browser.find_all("#dlq-actions") and not browser.find_all("input.pick")
    for path in PAGES:
        browser.visit(path)
        assert "The look-up failed" not in browser.text(), path
    browser.shot("viewer-dlq")


def test_an_admin_acts_and_a_forged_post_is_refused(auth_stack: AuthStack,
                                                    browser: Browser) -> None:
    _sign_in(browser, auth_stack.tokens["admin"])
    browser.visit(f"/messages/{auth_stack.pending}")
    assert browser.find_all("#cancel") and browser.find_all("#reschedule")
    browser.shot("admin-message")
    # a form without this session's CSRF token (as another site would send it): refused
    browser.driver.execute_script(
        "var f = document.createElement('form'); f.method = 'post';"
        f"f.action = '/messages/{auth_stack.pending}/cancel';"
        "document.body.appendChild(f); f.submit();")
    WebDriverWait(browser.driver, 30).until(
        lambda d: "CSRF_FAILED" in d.find_element("css selector", "main").text)
    browser.driver.get_log("browser")  # the refusal's 400 is expected here
    browser.shot("forged-post-refused")
    browser.visit(f"/messages/{auth_stack.pending}")
    assert browser.find_all("#cancel")  # still pending: nothing changed

