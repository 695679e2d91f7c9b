"""What a person sees on a dashboard page, read from the browser (for tests/test_browser_walk.py):

- `python_text`: Python object text shown as if it were content (`DeltaGenerator(...)`, a line that is
  just `None`, `<... object at 0x...>`, a traceback, an `stException` box);
- `cut_text`: elements whose text is cut or wider than their column at the page's width (labels, buttons,
  captions, metric labels, placeholders, tables), each as a short description;
- `cjk_text`: Chinese characters in the dashboard's own text (data shown as data is left out: code, plain
  text boxes, tables drawn on canvas, chat messages, log tails);
- `untranslated`: the English locale's strings shown on a page in another language.
"""
import re

from mmcore.base import i18n

# Areas that show data (files, model output, logs), not the dashboard's own words.
DATA_AREAS = ('[data-testid="stCode"], [data-testid="stText"], [data-testid="stDataFrame"], '
              '[data-testid="stChatMessage"], .minimind-log-tail, pre, code, [data-testid="stJson"], '
              '[data-testid="stExpander"] [data-testid="stText"], .js-plotly-plot')

# The page's areas: the main one (a page with a chat input scrolls in another container and keeps the
# input in a bottom block) and the sidebar.
AREAS = ('[data-testid="stMain"], [data-testid="stAppScrollToBottomContainer"], [data-testid="stBottom"], '
         '[data-testid="stSidebar"]')
MAIN = '[data-testid="stMainBlockContainer"]'

# The visible text of the page's areas, without the data areas.
_OWN_TEXT_JS = """([areas, skip]) => {
    const parts = [];
    for (const root of document.querySelectorAll(areas)) {
        const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
        let node;
        while ((node = walker.nextNode())) {
            const el = node.parentElement;
            if (!el || el.closest(skip)) continue;
            if (!el.checkVisibility || !el.checkVisibility({visibilityProperty: true})) continue;
            const text = node.textContent.trim();
            if (text) parts.push(text);
        }
        // a data grid's column titles are the dashboard's words (its cells are data)
        for (const th of root.querySelectorAll('[data-testid="stDataFrame"] table[role="grid"] thead th')) {
            const text = th.innerText.trim();
            if (text) parts.push(text);
        }
        for (const input of root.querySelectorAll('input[placeholder], textarea[placeholder]')) {
            if (!input.closest(skip) && input.checkVisibility() && !input.value && input.placeholder)
                parts.push(input.placeholder);
        }
    }
    return parts;
}"""

# Elements whose text is clipped (scrollWidth beyond clientWidth where overflow hides it), boxes wider
# than their column, placeholders wider than their input, tables wider than the main area.
_CUT_JS = """(mainSelector) => {
    const found = [];
    const main = document.querySelector(mainSelector);
    if (!main) return ['no main block on the page'];
    const mainBox = main.getBoundingClientRect();
    const name = (el) => (el.innerText || el.placeholder || el.getAttribute('aria-label') || '').trim().slice(0, 60);
    const visible = (el) => el.checkVisibility && el.checkVisibility({visibilityProperty: true})
                            && el.getBoundingClientRect().width > 0;
    const textSelectors = [
        '[data-testid="stWidgetLabel"] p', '[data-testid="stWidgetLabel"] [data-testid="stMarkdownContainer"]',
        'button p', 'button [data-testid="stMarkdownContainer"]', '[data-testid="stCaptionContainer"]',
        '[data-testid="stMetricLabel"]', '[data-testid="stMetricLabel"] p', '[data-testid="stMetricValue"]',
        '[data-testid="stTab"] p', '[data-testid="stSidebarNavLink"] span', '[data-testid="stRadio"] label p',
        '[data-testid="stSelectbox"] input', '[data-testid="stMultiSelect"] input',
        '.minimind-table th', '.minimind-table td'];
    const seen = new Set();
    for (const el of document.querySelectorAll(textSelectors.join(','))) {
        if (seen.has(el) || !visible(el)) continue;
        seen.add(el);
        const style = getComputedStyle(el);
        const clips = style.overflowX !== 'visible' || style.textOverflow === 'ellipsis';
        if (clips && el.scrollWidth > el.clientWidth + 1 && el.tagName !== 'INPUT')
            found.push(`cut: "${name(el)}" (${el.scrollWidth} px of text in ${el.clientWidth} px)`);
    }
    // selectbox values and placeholders, text and number inputs: the text against the field's inner width
    const canvas = document.createElement('canvas').getContext('2d');
    for (const input of main.querySelectorAll('input, textarea')) {
        if (!visible(input) || input.type === 'range' || input.type === 'file' || input.type === 'checkbox'
            || input.type === 'radio') continue;
        const text = input.value || input.placeholder;
        if (!text || input.tagName === 'TEXTAREA') continue;
        const style = getComputedStyle(input);
        canvas.font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
        const width = canvas.measureText(text).width;
        const room = input.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
        // a typed path may be longer than its field (it scrolls); a placeholder or a chosen option may not
        const what = input.value ? (input.getAttribute('role') === 'combobox' ? 'option' : null) : 'placeholder';
        if (what && width > room + 2)
            found.push(`${what} cut: "${text.slice(0, 60)}" (${Math.round(width)} px in ${Math.round(room)} px)`);
    }
    // boxes wider than the column (or the page) that holds them
    const boxes = main.querySelectorAll('[data-testid="stElementContainer"] > *, .minimind-table');
    for (const el of boxes) {
        if (!visible(el)) continue;
        const column = el.parentElement.closest('[data-testid="stColumn"]') || main;
        const box = el.getBoundingClientRect(), col = column.getBoundingClientRect();
        if (box.right > col.right + 2 || el.scrollWidth > Math.ceil(col.width) + 2) {
            const where = column === main ? 'the page' : 'its column';
            found.push(`wider than ${where}: ${el.getAttribute('data-testid') || el.className} "${name(el).slice(0, 40)}"`
                       + ` (${Math.round(Math.max(box.width, el.scrollWidth))} px in ${Math.round(col.width)} px)`);
        }
    }
    return found;
}"""

_NONE_LINE = re.compile(r"^\s*None\s*$", re.M)
_OBJECT = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>|DeltaGenerator\(|Traceback \(most recent call last\)")
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")


def page_text(page):
    """All visible text of the page (main area and sidebar), data areas included."""
    return page.evaluate("(areas) => [...document.querySelectorAll(areas)].map(e => e.innerText).join('\\n')", AREAS)


def own_text(page):
    """The visible text pieces of the dashboard's own (data areas left out), placeholders included."""
    return page.evaluate(_OWN_TEXT_JS, [AREAS, DATA_AREAS])


def python_text(page):
    """Python object text on the page: each finding as a line."""
    text = page_text(page)
    found = [f"shows {m.group(0)!r}" for m in _OBJECT.finditer(text)]
    if _NONE_LINE.search(text):
        found.append("a line that is just 'None'")
    found += [f"stException: {e[:200]}" for e in page.locator('[data-testid="stException"]').all_inner_texts()]
    return found


def cut_text(page):
    """Elements whose text is cut or wider than their column, as short descriptions."""
    return page.evaluate(_CUT_JS, MAIN)


def cjk_text(page):
    """The dashboard's own text pieces that hold a Chinese character."""
    return [piece for piece in own_text(page) if _CJK.search(piece)]


def _english_patterns():
    """(regex, key) for every English string that the Chinese table says differently. Placeholders match
    any text; strings without a letter worth translating (names, units, "GRPO") are left out."""
    en, zh = i18n.file_table("en"), i18n.file_table("zh")
    patterns = []
    for key, value in en.items():
        if zh.get(key) == value or not isinstance(value, str):
            continue
        words = re.sub(r"\{[^}]*\}", " ", value)
        if len(re.findall(r"[A-Za-z]{3,}", words)) < 1 or not re.search(r"[a-z]", words):
            continue  # "GRPO", "MoE", "{n} MB": the same in every language
        if re.fullmatch(r"[\w./-]*_[\w./-]*", value):
            continue  # an option's own name (max_seq_len) is shown as it is in every language
        parts = re.split(r"\{[^}]*\}", value)
        regex = ".+?".join(re.escape(p) for p in parts)
        patterns.append((re.compile(rf"^{regex}$", re.S), key))
    return patterns


_PATTERNS = None


def untranslated(page):
    """[(shown text, en key)] for each piece of the page's own text that is an English locale string."""
    global _PATTERNS
    if _PATTERNS is None:
        _PATTERNS = _english_patterns()
    found = []
    for piece in set(own_text(page)):
        if not re.search(r"[a-z]{3}", piece):
            continue
        for regex, key in _PATTERNS:
            if regex.match(piece):
                found.append((piece[:80], key))
                break
    return sorted(found)


def findings(page, lang):
    """Everything a person should not see on the page as it is now: Python object text, cut text, and Chinese on
    an English page or the dashboard's own English left on a 中文 page."""
    seen = python_text(page) + cut_text(page)
    if lang == "en":
        return seen + [f"Chinese on an English page: {piece[:80]!r}" for piece in cjk_text(page)]
    return seen + [f"English on the 中文 page: {text!r} ({key})" for text, key in untranslated(page)]
