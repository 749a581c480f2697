"""The chat page in a real headless browser: Chromium and chromedriver from the system packages
(nothing is downloaded), driven by Selenium. Load, send two messages, see the streamed answers
and the cache line (cached tokens from the second turn on); a screenshot is saved."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import MODEL, client

INSTALL = "install the system packages: apt-get install chromium chromium-driver (make test does, as root)"
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[Any]:
    if CHROMIUM is None or DRIVER is None:
        pytest.skip(f"no Chromium/chromedriver on this machine: {INSTALL}")
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1100,800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    yield driver
    driver.quit()


def _send(driver: Any, text: str, turn: int, wait: Any) -> Any:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "prompt")
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".assistant .cache")) == turn)
    return driver.find_elements(By.CSS_SELECTOR, ".assistant")[turn - 1]


def test_the_page_streams_an_answer_and_shows_the_cache(pc: Any, server: Any, browser: Any,
                                                      tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 30)
    browser.get(server.url + "/")
    wait.until(lambda d: d.find_element(By.ID, "model").text == f"model: {MODEL}")
    max_tokens = browser.find_element(By.ID, "max-tokens")
    max_tokens.clear()
    max_tokens.send_keys("8")
    messages = [{"role": "user", "content": "When is the choir rehearsal this week?"}]
    first = _send(browser, messages[0]["content"], 1, wait)
    shown = first.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent")
    want = client(server).chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                                  max_tokens=8).choices[0].message.content
    assert shown == want
    line = first.find_element(By.CSS_SELECTOR, ".cache").text
    assert re.search(r"cache: 0 of \d+ prompt tokens reused", line) and "TTFT" in line, line
    second = _send(browser, "And who brings the projector?", 2, wait)
    line = second.find_element(By.CSS_SELECTOR, ".cache").text
    cached = int(re.search(r"cache: (\d+) of", line).group(1))  # type: ignore[union-attr]
    assert cached > 0, line
    assert second.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent")
    shot = Path(os.environ.get("PERCACHE_SCREENSHOT_DIR", tmp_path)) / "chat-page.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 1000


def test_the_page_adds_documents_and_shows_sources_and_qa_bank_hits(server: Any, browser: Any,
                                                                      tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, 30)
    browser.get(server.url + "/")
    wait.until(lambda d: d.find_element(By.ID, "model").text == f"model: {MODEL}")
    browser.find_element(By.TAG_NAME, "summary").click()
    browser.find_element(By.ID, "docs").send_keys(
        "Ana: the choir rehearsal moved to Friday at 6 pm.\n\nCarl will bring the projector.")
    browser.find_element(By.ID, "add-docs").click()
    wait.until(lambda d: d.find_element(By.ID, "docs-status").text.startswith("added 2 documents"))
    Select(browser.find_element(By.ID, "mode")).select_by_value("ask")
    first = _send(browser, "When is the choir rehearsal?", 1, wait)
    assert "QA bank: miss" in first.find_element(By.CSS_SELECTOR, ".cache").text
    assert first.find_elements(By.CSS_SELECTOR, ".sources li")
    second = _send(browser, "When is the choir rehearsal?", 2, wait)
    assert "QA bank: hit" in second.find_element(By.CSS_SELECTOR, ".cache").text
    assert (second.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent").strip()
            == first.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent").strip())
    shot = Path(os.environ.get("PERCACHE_SCREENSHOT_DIR", tmp_path)) / "ask-page.png"
    assert browser.save_screenshot(str(shot))
