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
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import FAST_KDF, PASSPHRASE, HomeDir, initialize, memories_executable
from tests.fixtures.mcp_client import server_env
from tests.fixtures.model_servers import ModelServer, Reply

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
if not (CHROMIUM.exists() and DRIVER.exists()):
    pytest.skip("no chromium and chromedriver in /usr/bin: the browser tests skip", allow_module_level=True)

from selenium import webdriver  # noqa: E402  (after the skip: the test extra installs it, chromium may be absent)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
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


def _browser(page_load_strategy: str = "normal") -> Any:
    """Headless chromium through /usr/bin/chromedriver; ``page_load_strategy`` ``none`` for a test that acts while
    a page is still loading (with ``normal`` the driver waits for the navigation before every command)."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    options.page_load_strategy = page_load_strategy
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,900", "--lang=en-US"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(str(DRIVER)), options=options)


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
    browser = None
    try:
        assert process.stderr is not None
        line = process.stderr.readline().decode()
        found = re.search(r"(http://127\.0\.0\.1:\d+)(/\S*\?token=\S+)", line)
        assert found is not None, line
        browser = _browser()
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
    in_view = "const r = arguments[0].getBoundingClientRect(); return r.top >= 0 && r.top < window.innerHeight;"
    assert browser.execute_script(in_view, hit[0])  # the page opened at the passage
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


def _jobs(web: Web, kind: str) -> list[dict[str, Any]]:
    return [job for job in web.home.ok("jobs")["jobs"] if job["kind"] == kind]


def _poll(what: str, predicate: Any, timeout: float = 60) -> Any:
    """``predicate()`` once it is truthy, tried every 0.2 s (a deadline for hangs, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_ask_cancel_hangs_up_on_the_daemon(web: Web) -> None:
    """Enter sends the question; Cancel while the model works stops the page and the daemon's ask job is cancelled
    (the fake generation service holds its reply until the end, so only the cancel can end the job). A browser of
    its own that does not wait for page loads: the answer's page is still loading when the test presses Cancel."""
    released = threading.Event()
    web.server.script("chat", Reply(hold=released))
    browser = _browser("none")
    try:
        browser.get(web.browser.current_url)  # this session's cookie is the other browser's: copy it
        session = web.browser.get_cookie("memories_session")
        assert session is not None
        browser.add_cookie({"name": session["name"], "value": session["value"], "path": "/"})
        browser.get(f"{web.base}/ask")
        question = WebDriverWait(browser, 30).until(lambda b: b.find_element(By.NAME, "question"))
        before = {job["id"] for job in _jobs(web, "ask")}
        question.send_keys("公園 看書", Keys.ENTER)  # the keyboard submits (Shift+Enter would add a line)
        cancel = WebDriverWait(browser, 30).until(lambda b: b.find_element(By.CSS_SELECTOR, "button.cancel"))
        WebDriverWait(browser, 30).until(lambda b: cancel.is_displayed())
        job = _poll("the ask job", lambda: [j for j in _jobs(web, "ask") if j["id"] not in before])[0]
        assert job["state"] == "running", job
        assert browser.switch_to.active_element == cancel  # the focus went to Cancel
        browser.save_screenshot(str(web.shots / "ask-waiting.png"))
        cancel.send_keys(Keys.ENTER)
        ended = _poll(
            "the ask job to end",
            lambda: [
                j for j in _jobs(web, "ask") if j["id"] == job["id"] and j["state"] not in ("running", "cancelling")
            ],
        )
        assert ended[0]["state"] == "cancelled", ended
        assert not released.is_set() and "Cancelled" in browser.find_element(By.CSS_SELECTOR, ".waiting").text
        browser.save_screenshot(str(web.shots / "ask-cancelled.png"))
    finally:
        released.set()
        browser.quit()


def _tab_to(browser: Any, element: Any, presses: int = 80) -> None:
    """Press Tab until ``element`` has the focus (the keyboard alone reaches it)."""
    for _ in range(presses):
        if browser.switch_to.active_element == element:
            return
        ActionChains(browser).send_keys(Keys.TAB).perform()
    raise AssertionError(f"Tab never reached {element.get_attribute('outerHTML')}")


def test_a_background_index_moves_live_and_is_cancelled_from_the_keyboard(web: Web) -> None:
    """The status page follows a background index job in place (no reload: a marker set in the page survives, and
    the keyboard focus stays on the job's Cancel button while the rows are replaced), then Enter on Cancel cancels
    it. The fake embedding service holds each batch until the test lets it go, so the progress moves when the test
    says and the job is still running when it is cancelled."""
    browser, holds = web.browser, [threading.Event() for _ in range(40)]
    web.server.script("embeddings", *(Reply(hold=hold) for hold in holds))
    try:
        for number in range(12):
            body = f"Fern sample {number} for the index.\n\nA second paragraph about fern {number}."
            web.home.ok("memory", "add", "notes", "--kind", "card", "--title", f"Fern {number}", "--body", body)
        job = web.home.ok("rag", "index", "notes", "--background")["job_id"]
        browser.get(f"{web.base}/language?to=en&back=/status")
        cancel = WebDriverWait(browser, 30).until(
            lambda b: b.find_element(By.CSS_SELECTOR, f'li.job[data-job="{job}"] button')
        )
        browser.execute_script("window.marker = 'still this page';")
        _tab_to(browser, cancel)

        def done() -> int:
            value = browser.find_element(By.CSS_SELECTOR, "progress.indexing").get_attribute("value")
            return int(value or 0)

        seen = WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.CSS_SELECTOR, "progress.indexing"))
        assert seen
        for hold in holds[:2]:
            before = done()
            hold.set()
            WebDriverWait(browser, 60).until(lambda b, before=before: done() > before)
            assert browser.execute_script("return window.marker;") == "still this page"  # updated in place
            assert browser.switch_to.active_element.text == "Cancel"  # the focus survived the refresh
        web.shot("status-indexing")
        browser.switch_to.active_element.send_keys(Keys.ENTER)
        _poll("the cancel", lambda: [j for j in _jobs(web, "index") if j["id"] == job and j["state"] != "running"])
        for hold in holds:
            hold.set()
        WebDriverWait(browser, 60).until(
            lambda b: (
                b.find_element(By.CSS_SELECTOR, f'li.job[data-job="{job}"]').get_attribute("data-state") == "cancelled"
            )
        )
        assert web.home.ok("rag", "status", "notes")["missing"] > 0
        web.shot("status-cancelled")
    finally:
        for hold in holds:
            hold.set()


def test_keyboard_alone(web: Web) -> None:
    """Tab goes through the search page in reading order with a visible focus ring on each stop, Enter opens the
    filters and submits the form, and the skip link leads past the navigation."""
    browser = web.browser
    browser.get(f"{web.base}/language?to=en&back=/search")
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.NAME, "q"))
    browser.execute_script("document.querySelector('a.skip').focus();")  # the page's first stop
    stops = []
    for _ in range(12):
        element = browser.switch_to.active_element
        style = browser.execute_script(
            "const s = getComputedStyle(arguments[0]); return [s.outlineStyle, parseFloat(s.outlineWidth)];", element
        )
        name = element.get_attribute("name") or element.text.strip() or element.tag_name
        assert style[0] != "none" and style[1] >= 2, (name, style)
        stops.append(name)
        ActionChains(browser).send_keys(Keys.TAB).perform()
    expected = ["Skip to the content", "Search", "Ask", "Status", "English", "简体中文", "繁體中文"]
    assert stops[:7] == expected, stops
    assert stops[7:12] == ["vault", "q", "mode", "match_mode", "limit"], stops
    web.shot("search-keyboard")
    summary = browser.switch_to.active_element
    assert summary.tag_name == "summary"
    summary.send_keys(Keys.ENTER)
    ActionChains(browser).send_keys(Keys.TAB).perform()
    assert browser.switch_to.active_element.get_attribute("name") == "since"  # the filters opened
    browser.find_element(By.NAME, "q").send_keys("公园", Keys.ENTER)
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".result"))
    browser.execute_script("document.querySelector('a.skip').focus();")
    browser.switch_to.active_element.send_keys(Keys.ENTER)  # the skip link
    WebDriverWait(browser, 30).until(lambda b: b.switch_to.active_element.get_attribute("id") == "main")


def _fonts(browser: Any, selector: str) -> dict[str, int]:
    """The platform fonts that drew the text of the first element ``selector`` finds: family → glyphs (the
    DevTools protocol's CSS.getPlatformFontsForNode, what the screen shows rather than what the CSS asks)."""
    browser.execute_cdp_cmd("DOM.enable", {})
    browser.execute_cdp_cmd("CSS.enable", {})
    root = browser.execute_cdp_cmd("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
    node = browser.execute_cdp_cmd("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    fonts = browser.execute_cdp_cmd("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    return {font["familyName"]: font["glyphCount"] for font in fonts}


@pytest.mark.parametrize(
    ("language", "word", "family"),
    [("zh-Hant", "狀態", "Noto Sans CJK TC"), ("zh-Hans", "状态", "Noto Sans CJK SC"), ("en", "Status", None)],
)
def test_each_language_is_drawn_in_its_own_script(web: Web, language: str, word: str, family: str | None) -> None:
    """Traditional Chinese in a Traditional font, Simplified in a Simplified one (the same code points take other
    shapes in each: 說 vs 说 are different characters, but 骨, 直 and 角 differ only by the font), English in a
    Latin font; each page's screenshot in the output folder."""
    browser = web.browser
    browser.get(f"{web.base}/language?to={language}&back=/status")
    WebDriverWait(browser, 30).until(lambda b: b.find_element(By.TAG_NAME, "html").get_attribute("lang") == language)
    link = browser.find_element(By.CSS_SELECTOR, 'nav a[href="/status"]')
    assert link.text == word
    fonts = _fonts(browser, 'nav a[href="/status"]')
    if family is None:
        assert fonts and not any("CJK" in name for name in fonts), fonts
    else:
        assert set(fonts) == {family}, fonts
    web.shot(f"status-{language}")
    browser.get(f"{web.base}/search?vault=notes&mode=bm25&q=%E5%85%AC%E5%9C%92")  # 公園
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".result"))
    web.shot(f"search-{language}")


def test_a_locked_home_says_how_to_unlock(web: Web) -> None:
    """Locked, the status page says so and how to unlock in a terminal (no passphrase form: a port squatted while
    the app is down could capture it); unlocked again, a reload shows the vaults."""
    browser = web.browser
    web.home.ok("lock")
    try:
        browser.get(f"{web.base}/language?to=en&back=/status")
        note = WebDriverWait(browser, 30).until(lambda b: b.find_element(By.CSS_SELECTOR, "main .warning"))
        assert "memories unlock" in note.text
        assert not browser.find_elements(By.CSS_SELECTOR, "input[type=password]")
        web.shot("status-locked")
        browser.get(f"{web.base}/search?vault=notes&q=fern")
        assert "vault_locked" in browser.find_element(By.TAG_NAME, "main").text
    finally:
        web.home.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    browser.get(f"{web.base}/status")
    vaults = WebDriverWait(browser, 30).until(lambda b: b.find_element(By.CSS_SELECTOR, "[data-live=indexes]"))
    assert "notes" in vaults.text and "Unlocked" in browser.find_element(By.TAG_NAME, "main").text
