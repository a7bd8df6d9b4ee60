"""Words that carry nothing of what a question asks about, for ``rag ask``'s evidence rule and BM25 query (R-43).

A question is written around what it asks: *What does the evidence say about ZEBRAMARK calibration?* holds three
words of content and five of asking. Counted as query words, those five made a note holding every content word
cover less than half of the question, so ``rag ask`` refused a question its only note answers. The lists below
are the words of asking and grammar, compared with the analyzer's terms (lower case, Simplified Chinese: the
Traditional forms are folded before they are compared, so 為什麼 is 为什么).

- **English**: the Snowball English stop list (M. F. Porter, snowballstem.org, ``algorithms/english/stop.txt``,
  BSD licence; also Lucene's ``EnglishAnalyzer`` default): pronouns, the forms of *be*, *have*, *do*, *would*,
  *should*, *could*, *ought*, articles, prepositions, conjunctions, the interrogatives (*what*, *which*, *who*,
  *when*, *where*, *why*, *how*). Snowball leaves out *us*, *will*, *shall*, *can*, *may*, *might*, *must* for
  their homonyms (US, a will, a can, May), and so does this list. Its contractions are listed as the analyzer cuts
  them (``don't`` gives ``don``; one-letter pieces never count), except ``won``, which is also *win*'s past. Added:
  the words of asking the same file names among the commonest English words (*say*, *says*, *said*, *whether*,
  *many*, *also*, *just*, *ever*) and those of a request (*tell*, *explain*, *describe*, *know*, *please*, *much*),
  and *note*/*notes*, which in a question to one's own notes name the vault, not a topic.
- **Chinese** (Jieba's search-mode cut, so a word and the words inside it: 为什么 gives 什么 and 为什么): the
  interrogative pronouns and adverbs of Mandarin (什么 what, 怎么/怎样/如何 how, 为什么/为何 why, 哪/哪里/哪些
  which and where, 谁 who, 多少/几 how many, 何时/什么时候 when, 是否/是不是/有没有/能否 whether), the words of a
  request (请问, 请, 告诉, 介绍, 解释, 一下, 关于), 笔记 (notes, as above), and the commonest function words:
  pronouns, demonstratives, connectives, auxiliaries and particles (的, 了, 是, 在, 和, 我们, 这个, 因为, 可以…).
  One-character words already count only when a question has nothing longer.

A word that is also a name (WHO, IT) is lost only when the question holds nothing else; the vector half of the
rule does not read these lists.
"""

from __future__ import annotations

from collections.abc import Sequence

_ENGLISH = """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself
it its itself they them their theirs themselves what which who whom whose this that these those
am is are was were be been being have has had having do does did doing would should could ought
isn aren wasn weren hasn haven hadn doesn don didn wouldn shan shouldn cannot couldn mustn let ll ve re
a an the and but if or because as until while of at by for with about against between into through during
before after above below to from up down in out on off over under again further then once here there when where
why how all any both each few more most other some such no nor not only own same so than too very
say says said whether many also just ever tell explain describe know please much note notes
"""

_CHINESE = """
什么 为什么 怎么 怎么样 怎样 如何 为何 哪 哪里 哪儿 哪些 哪个 哪位 哪一年 谁 多少 几 几个 何时 何地 时候
是否 是不是 不是 有没有 没有 能否 能不能 不能 可不可以 可否 吗 呢 吧 啊
请问 请 告诉 介绍 解释 一下 关于 笔记
我 你 您 他 她 它 我们 你们 他们 她们 它们 自己 这 那 这个 那个 这些 那些 这样 那样 这里 那里
的 地 得 了 着 过 是 在 有 和 与 及 以及 或 或者 还是 也 都 就 而 而且 并且 但 但是 因为 所以 如果 虽然
可以 能 会 要 应该 已经 就是 一个 一些 其中 之一 的话 对于 对 把 被 给 从 向
"""

STOP_WORDS = frozenset(_ENGLISH.split()) | frozenset(_CHINESE.split())
"""The words of the module docstring, as analyzed terms."""


def content_terms(terms: Sequence[str]) -> tuple[str, ...]:
    """``terms`` without :data:`STOP_WORDS`, in order.

    >>> content_terms(["what", "does", "the", "evidence", "say", "about", "zebramark", "calibration"])
    ('evidence', 'zebramark', 'calibration')
    >>> content_terms(["什么", "为什么", "用", "方法"])
    ('用', '方法')
    """
    return tuple(term for term in terms if term not in STOP_WORDS)
