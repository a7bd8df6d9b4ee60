"""The web app's UI text in English, Simplified and Traditional Chinese, and which one a request gets: the
``lang`` cookie the language switch sets, else the browser's ``Accept-Language`` (RFC 9110 section 12.5.4 weights),
else English. Note text is never translated: it is shown as written.

>>> pick("zh-TW,zh;q=0.9,en;q=0.8", None), pick("en-US,zh-CN;q=0.5", None), pick("fr", None), pick("en", "zh-Hans")
('zh-Hant', 'en', 'en', 'zh-Hans')
"""

from __future__ import annotations

LANGUAGES = ("en", "zh-Hans", "zh-Hant")
"""The UI's languages, as ``lang`` attribute values (BCP 47)."""

NAMES = {"en": "English", "zh-Hans": "简体中文", "zh-Hant": "繁體中文"}
"""Each language's name in itself, for the switch."""

_TEXT: dict[str, tuple[str, str, str]] = {
    "search": ("Search", "搜索", "搜尋"),
    "note": ("Note", "笔记", "筆記"),
    "ask": ("Ask", "提问", "提問"),
    "status": ("Status", "状态", "狀態"),
    "vault": ("Vault", "库", "庫"),
    "query": ("Query", "查询", "查詢"),
    "mode": ("Mode", "模式", "模式"),
    "mode_default": ("default", "默认", "預設"),
    "match_mode": ("Match", "匹配", "比對"),
    "limit": ("Results per page", "每页结果数", "每頁結果數"),
    "filters": ("Filters", "筛选", "篩選"),
    "since": ("Since", "起始日期", "起始日期"),
    "until": ("Until", "截止日期", "截止日期"),
    "tags": ("Tags (comma-separated)", "标签（逗号分隔）", "標籤（逗號分隔）"),
    "kind": ("Kind", "类型", "類型"),
    "kind_any": ("any", "全部", "全部"),
    "source": ("Source (glob)", "来源（通配）", "來源（萬用字元）"),
    "meta": ("Metadata (KEY=VALUE, one a line)", "元数据（键=值，每行一个）", "中繼資料（鍵=值，每行一個）"),
    "go": ("Search", "搜索", "搜尋"),
    "results": ("Results", "结果", "結果"),
    "no_results": ("No note matches.", "没有匹配的笔记。", "沒有相符的筆記。"),
    "score": ("score", "得分", "分數"),
    "why": ("Why here", "为何在此", "為何在此"),
    "previous": ("Previous", "上一页", "上一頁"),
    "next": ("Next", "下一页", "下一頁"),
    "page": ("Page", "第几页", "頁"),
    "mode_used": ("Mode used", "实际模式", "實際模式"),
    "error": ("Error", "错误", "錯誤"),
    "language": ("Language", "语言", "語言"),
    "warning": ("Warning", "警告", "警告"),
    "metadata": ("Metadata", "元数据", "中繼資料"),
    "revisions": ("Revisions", "修订", "修訂"),
    "revision": ("Revision", "修订", "修訂"),
    "conflict": ("This note has a conflict between revisions:", "此笔记的修订之间有冲突：", "此筆記的修訂之間有衝突："),
    "created": ("Created", "创建于", "建立於"),
    "updated": ("Updated", "更新于", "更新於"),
    "to_hit": ("Go to the passage the result pointed to", "跳到结果所指的段落", "跳到結果所指的段落"),
    "question": ("Question", "问题", "問題"),
    "answer": ("Answer", "回答", "回答"),
    "sources": ("Sources", "来源", "來源"),
    "ask_go": ("Ask", "提问", "提問"),
    "insufficient": (
        "Not enough evidence: the vault holds nothing that answers this question.",
        "证据不足：库中没有能回答这个问题的内容。",
        "證據不足：庫中沒有能回答這個問題的內容。",
    ),
    "insufficient_model": (
        "Not enough evidence: the model's answer cited none of the notes, so it is not shown.",
        "证据不足：模型的回答未引用任何笔记，因此不予显示。",
        "證據不足：模型的回答未引用任何筆記，因此不予顯示。",
    ),
    "truncated": ("The answer was cut at its length cap.", "回答超出长度上限，已截断。", "回答超出長度上限，已截斷。"),
    "waiting": (
        "After you ask, this page loads when the model has answered; to stop waiting, press Esc or cancel.",
        "提问后，模型作答完毕本页才会载入；要停止等待，请按 Esc 或取消。",
        "提問後，模型作答完畢本頁才會載入；要停止等待，請按 Esc 或取消。",
    ),
    "working": (
        "The model is working on the answer…",
        "模型正在作答……",
        "模型正在作答……",
    ),
    "cancelled": ("Cancelled: the question was not answered.", "已取消：问题未获回答。", "已取消：問題未獲回答。"),
    "skip": ("Skip to the content", "跳到正文", "跳到正文"),
    "locked": (
        "The vault is locked. Unlock it in a terminal with `memories unlock`, then reload this page.",
        "库已锁定。请在终端运行 `memories unlock` 解锁，然后重新载入本页。",
        "庫已鎖定。請在終端機執行 `memories unlock` 解鎖，然後重新載入本頁。",
    ),
    "unlocked": ("Unlocked", "已解锁", "已解鎖"),
    "vaults": ("Vaults", "库", "庫"),
    "index": ("Index", "索引", "索引"),
    "records": ("records", "条记录", "筆記錄"),
    "chunks": ("chunks", "个分块", "個分塊"),
    "embedded": ("embedded", "已嵌入", "已嵌入"),
    "missing": ("missing", "缺失", "缺失"),
    "indexing": ("Indexing", "正在索引", "正在索引"),
    "watches": ("Watched folders", "监视的文件夹", "監視的資料夾"),
    "no_watches": ("No folder is watched.", "没有监视的文件夹。", "沒有監視的資料夾。"),
    "paused": ("paused", "已暂停", "已暫停"),
    "resume": ("Resume", "恢复", "恢復"),
    "accept_deletions": ("Accept the deletions", "接受删除", "接受刪除"),
    "jobs": ("Jobs", "任务", "工作"),
    "no_jobs": ("No job.", "没有任务。", "沒有工作。"),
    "cancel": ("Cancel", "取消", "取消"),
    "grants": ("Grants", "授权", "授權"),
    "no_grants": ("No grant.", "没有授权。", "沒有授權。"),
    "revoke": ("Revoke", "撤销", "撤銷"),
    "client": ("Client", "客户端", "用戶端"),
    "scope": ("Scope", "范围", "範圍"),
    "expires": ("Expires", "到期", "到期"),
    "never": ("never", "永不", "永不"),
    "state": ("State", "状态", "狀態"),
    "refresh": ("Refresh", "刷新", "重新整理"),
    "done": ("Done.", "完成。", "完成。"),
}


def pick(accept_language: str | None, chosen: str | None) -> str:
    """The UI language: ``chosen`` (the switch's cookie) when it is one of :data:`LANGUAGES`, else the first of the
    browser's ``Accept-Language`` ranges we have (``zh-TW``/``zh-HK``/``zh-Hant*`` Traditional, other ``zh*``
    Simplified, ``en*`` English), by weight, else ``en``."""
    if chosen in LANGUAGES:
        return str(chosen)
    ranges: list[tuple[float, int, str]] = []
    for position, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        weight = 1.0
        if params.strip().startswith("q="):
            try:
                weight = float(params.strip()[2:])
            except ValueError:
                weight = 0.0
        ranges.append((-weight, position, tag.strip().lower()))
    for weight, _, tag in sorted(ranges):
        if weight >= 0:
            continue
        if tag.startswith("zh"):
            return "zh-Hant" if tag.startswith(("zh-tw", "zh-hk", "zh-mo", "zh-hant")) else "zh-Hans"
        if tag.startswith("en"):
            return "en"
    return "en"


def text(language: str, key: str) -> str:
    """The UI string ``key`` in ``language`` (one of :data:`LANGUAGES`)."""
    return _TEXT[key][LANGUAGES.index(language)]
