"""``memories web`` in a real browser (issue 31): Debian's chromium, headless, driven by selenium through
``/usr/bin/chromedriver`` (nothing downloaded at run time), against a real daemon with sample notes in Chinese
(Simplified and Traditional) and English: a search with a filter and a mode, a result opened at its span, hostile
notes that set no flag, a question asked of the loopback fake generation service and its [S1] followed to the
note, the status page, the language switch, keyboard use. One daemon, one browser, one server for
every check (module fixtures); a screenshot of each page goes to the test's output folder. Without chromium (and
without apt for .ci/run to install it) the module skips and says so."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import FAST_KDF, HomeDir, initialize, memories_executable
from tests.fixtures.mcp_client import server_env
from tests.fixtures.model_servers import ModelServer

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
if not (CHROMIUM.exists() and DRIVER.exists()):
    pytest.skip("no chromium and chromedriver in /usr/bin: the browser tests skip", allow_module_level=True)

from selenium import webdriver  # noqa: E402  (after the skip: the test extra installs it, chromium may be absent)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

HOSTILE = (
    '<script>window.flag=1</script>\n\n<img src=x onerror="window.flag=2">\n\n'
    "[click me](javascript:window.flag=3)\n\n<svg><script>window.flag=4</script></svg>\n\n"
    "[entity](&#106;avascript:window.flag=5)\n\nhostile words here\n"
)


class Web:
    """The server's base URL, the browser and the screenshot folder."""

    def __init__(self, base: str, browser: Any, shots: Path, home: HomeDir, server: ModelServer) -> None:
        self.base, self.browser, self.shots, self.home, self.server = base, browser, shots, home, server

    def shot(self, name: str) -> None:
        self.browser.save_screenshot(str(self.shots / f"{name}.png"))

    def flag(self) -> Any:
        return self.browser.execute_script("return window.flag === undefined ? null : window.flag;")


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    root = tmp_path_factory.mktemp("web")
    (root / "home").mkdir(mode=0o700)
    home = HomeDir(root / "home")
    server = ModelServer()  # the loopback fake embedding and generation services
    home.config.write_text(
        FAST_KDF
        + f"[rag.embedding]\nprotocol = 'compatible'\nurl = '{server.url('embeddings')}'\nmodel = 'fake'\n"
        + "dimensions = 8\nbatch_size = 2\nconcurrency = 1\n"
        + f"[rag.generation]\nprotocol = 'compatible'\nurl = '{server.url('chat')}'\nmodel = 'fake-chat'\n"
    )
    initialize(home)
    notes = [
        ("card", "公园散步", "今天 去了 公园 散步，天气 很好。\n\n第二段 写 别的 事情。"),
        ("card", "公園日記", "昨天 在 公園 看書，很 安靜。"),
        ("memory", "Park walk", "A long walk in the park with friends.\n\nSecond paragraph about lunch."),
        ("card", "<script>window.flag=9</script>", HOSTILE),
    ]
    for kind, title, body in notes:
        home.ok("memory", "add", "notes", "--kind", kind, "--title", title, "--body", body)
    process = subprocess.Popen(
        [memories_executable(), "web", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=server_env(home, None),
    )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,900", "--lang=en-US"):
        options.add_argument(argument)
    browser = None
    try:
        assert process.stderr is not None
        line = process.stderr.readline().decode()
        found = re.search(r"(http://127\.0\.0\.1:\d+)(/\S*\?token=\S+)", line)
        assert found is not None, line
        browser = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
        browser.get(found.group(1) + found.group(2))
        shots = root / "screenshots"
        shots.mkdir()
        yield Web(found.group(1), browser, shots, home, server)
    finally:
        if browser is not None:
            browser.quit()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        home.stop()
        server.close()


def test_search_with_a_filter_and_a_mode_then_open_at_the_span(web: Web) -> None:
    browser = web.browser
    browser.get(f"{web.base}/search")
    box = browser.find_element(By.NAME, "q")
    box.send_keys("公园")
    Select(browser.find_element(By.NAME, "mode")).select_by_value("bm25")
    browser.find_element(By.TAG_NAME, "summary").click()
    Select(browser.find_element(By.NAME, "kind")).select_by_value("card")
    box.send_keys(Keys.ENTER)  # the keyboard submits the form
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".result"))
    assert "mode=bm25" in browser.current_url and "kind=card" in browser.current_url
    titles = [element.text for element in browser.find_elements(By.CSS_SELECTOR, ".result h2")]
    assert any("公园散步" in title for title in titles) and any("公園日記" in title for title in titles), titles
    assert not any("Park walk" in title for title in titles)  # a memory, filtered out
    assert browser.find_elements(By.CSS_SELECTOR, ".snippet mark")
    web.shot("search")
    browser.find_element(By.CSS_SELECTOR, ".result h2 a").click()
    hit = WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "hit"))
    assert "公园" in hit[0].text or "公園" in hit[0].text
    assert browser.current_url.endswith("#hit")
    web.shot("note")


def test_hostile_note_sets_no_flag(web: Web) -> None:
    browser = web.browser
    browser.get(f"{web.base}/search?vault=notes&q=hostile+words")
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".result"))
    assert web.flag() is None
    browser.find_element(By.CSS_SELECTOR, ".result h2 a").click()
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.CSS_SELECTOR, "article.note"))
    for link in browser.find_elements(By.CSS_SELECTOR, "article.note a"):
        href = link.get_attribute("href") or ""
        assert not href.lower().startswith("javascript"), href
        link.send_keys(Keys.ENTER) if href.startswith(web.base) else None
    assert web.flag() is None
    assert not browser.find_elements(By.CSS_SELECTOR, "article.note script, article.note img, article.note svg")
    web.shot("hostile-note")


def test_status_page_and_the_language_switch(web: Web) -> None:
    browser = web.browser
    browser.get(f"{web.base}/status")
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "vaults"))
    assert "notes" in browser.find_element(By.TAG_NAME, "main").text
    web.shot("status")
    browser.find_element(By.CSS_SELECTOR, 'a[hreflang="zh-Hant"]').click()
    WebDriverWait(browser, 30).until(lambda b: b.find_element(By.TAG_NAME, "html").get_attribute("lang") == "zh-Hant")
    assert "狀態" in browser.find_element(By.TAG_NAME, "body").text
    web.shot("status-zh-Hant")
    browser.get(f"{web.base}/language?to=zh-Hans&back=/search")
    assert "搜索" in browser.find_element(By.TAG_NAME, "body").text
    web.shot("search-zh-Hans")


def test_ask_and_follow_a_citation(web: Web) -> None:
    browser = web.browser
    browser.get(f"{web.base}/ask")
    question = browser.find_element(By.NAME, "question")
    question.send_keys("公园 散步")
    browser.find_element(By.CSS_SELECTOR, "form.ask button").click()
    WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, "a.cite, .error, .insufficient"))
    cite = browser.find_elements(By.CSS_SELECTOR, "a.cite")
    assert cite and cite[0].text == "[S1]", browser.find_element(By.TAG_NAME, "main").text
    web.shot("ask")
    cite[0].click()
    source = browser.find_element(By.CSS_SELECTOR, "li#S1 a")
    source.click()
    hit = WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "hit"))
    assert hit[0].text
    web.shot("ask-cited-note")
