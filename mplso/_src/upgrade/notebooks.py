"""A Jupyter notebook's code cells as one Python text, and back into cells.

`read` joins the notebook's code cells into one Python module, so that an
import in one cell resolves a use in a later one and an added import is
added once; `Notebook.split` cuts the converted text back into cells and
`Notebook.encode` writes those that changed into the notebook's own bytes.

How the join works, and why it splits back exactly:

    for each code cell (index i) that is Python:
      '"<token> cell i"'            # a marker: a string statement of its own
      the cell's lines, each IPython line as '<indent>"<token> n"'

IPython lines are never parsed as Python: line magics (`%time f()`), shell
lines (`!pip install x`, `files = !ls`), help (`obj?`, `?obj`, `obj??`),
the escapes `/f a`, `,f a`, `;f a`, a word that only IPython's automagic
runs (`cd data`, `pip install x`: a line Python cannot parse), and the
lines a shell or magic line continues onto with a trailing backslash. Each
becomes a string statement of the same indentation, so that the cell still
parses, and comes back byte for byte after the conversion. A cell magic
whose body is Python (`%%time`, `%%timeit`, `%%capture`, `%%prun`,
`%%debug`) keeps its first line that way; any other cell magic (`%%bash`,
`%%writefile`, ...) leaves the whole cell alone.

Markers are statements, not comments: the upgrade adds its imports after
the first block of import lines, and a statement ends that block at the end
of the cell. What lies between marker i and the next marker is cell i.

The JSON is never written again whole: the source value of each changed
cell is replaced in the file's own text, in the form it had (a list of lines
or one string), with the lines that did not change written with their own
bytes, and new ones escaped as the file escapes (`\\u00e9` or `é`). A
notebook whose cells did not change is its own bytes.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import json
import re

from mplso._src.upgrade import names

_BOM = b"\xef\xbb\xbf"
_TOKEN = "mplso-upgrade-kept"  # Made unique per notebook by a suffix.

# Cell magics whose body is Python that IPython runs in the user's
# namespace: only their first line is IPython's.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun",
                                 "debug"})

# IPython's automagic: these magic names (and the shell aliases IPython
# defines) run without their `%` when the line is not Python.
_AUTOMAGIC = frozenset({
    "alias", "autoreload", "bookmark", "cat", "cd", "clear", "conda",
    "config", "cp", "dhist", "dirs", "env", "history", "less", "load",
    "load_ext", "ls", "lsmagic", "man", "matplotlib", "mkdir", "more", "mv",
    "pdb", "pip", "popd", "prun", "psearch", "pushd", "pwd", "pylab",
    "reload_ext", "reset", "rm", "rmdir", "run", "set_env", "store",
    "tensorflow_version", "time", "timeit", "who", "whos", "xmode"})

# `files = !ls`, `a, b = %sx cmd`: IPython's assignment from a shell line
# or a magic.
_ASSIGNED = re.compile(r"[\w.]+(\s*,\s*[\w.]+)*\s*=\s*[!%]")
# `name?`, `name.attr??`, `%magic?`: IPython's help at the end of a line.
_HELP_END = re.compile(
    r"%{0,2}[A-Za-z_*][\w*]*(\.[A-Za-z_*][\w*]*)*\?{1,2}")
# A magic's name, then what Python could not read after a name (IPython
# reads `history = f(` or `ls -la` as Python, not as automagic).
_AUTOMAGIC_LINE = re.compile(
    r"([A-Za-z_]\w*)\s+(?![=,&^|*/+\-<>.(\[{:;%@!~]|"
    r"(?:is|not|in|and|or|if|else|for)\b)\S")
# A `\uXXXX` escape of a character beyond ASCII, not itself escaped.
_ESCAPED_NON_ASCII = re.compile(r"(?<!\\)(?:\\\\)*\\u(?!00[0-7])[0-9a-fA-F]{4}")
_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()

# The severities of `Note`, as the report writes them.
INFO = "INFO"
WARNING = "WARNING"
ERROR = "ERROR"


class NotebookError(ValueError):
  """The file is not a notebook the upgrade can read: it is copied unchanged.

  Attributes:
    line: the 1-based line of the file the error is at, or None.
  """

  def __init__(self, line: int | None, message: str):
    super().__init__(message)
    self.line = line


@dataclasses.dataclass(frozen=True)
class Note:
  """Something the report says about one cell of a notebook.

  Attributes:
    cell: the cell's number, 1 for the notebook's first cell (of any type).
    line: the 1-based line in the cell, or None.
    severity: `INFO`, `WARNING` or `ERROR`.
    message: what became of the cell, and why.
  """
  cell: int
  line: int | None
  severity: str
  message: str


@dataclasses.dataclass(frozen=True)
class _Cell:
  """A code cell: where its source value lies in the file, and its text."""
  index: int  # In the notebook's `cells`, from 0.
  start: int  # The source value's span in the file's text.
  end: int
  text: str  # The source, joined.
  items: tuple[tuple[int, int], ...] | None  # Spans of a list's strings.


@dataclasses.dataclass
class _Joined:
  """A cell as it lies in the joined text."""
  cell: _Cell
  marker: str  # The marker line's text, without its line ending.
  ended: bool  # Whether the cell's text ends with a line ending.
  magic: str | None  # The line of a cell magic whose body is Python.


class Notebook:
  """A notebook as read: its bytes, and its code cells as one Python text.

  Attributes:
    data: the file's bytes.
    python: the code cells that are Python, joined (see the module's
      docstring); "" when there are none.
    notes: what the report says about cells left alone.
  """

  def __init__(self, data: bytes, text: str, cells: list[_Cell],
               language: str | None):
    self.data = data
    self._text = text
    self._cells = cells
    self._ascii = text.isascii() and bool(_ESCAPED_NON_ASCII.search(text))
    self._newline = "\r\n" if "\r\n" in text else "\n"
    self.notes: list[Note] = []
    self._joined: list[_Joined] = []
    self._kept: dict[str, str] = {}  # {placeholder: the line it stands for}.
    self._lines: list[tuple[int, int] | None] = []  # By joined line - 1.
    if language is not None:
      self.notes.append(Note(1, None, INFO, (
          f"the notebook's language is {language!r}, not Python: left as "
          "it is")))
      self.python = ""
    else:
      self.python = self._join()

  def _join(self) -> str:
    """The Python text of the code cells (and the notes on the others)."""
    texts = "".join(cell.text for cell in self._cells)
    token, suffix = _TOKEN, 0
    while token in texts:
      suffix += 1
      token = f"{_TOKEN}-{suffix}"
    newline = next((_ending(line) for cell in self._cells
                    for line in _lines(cell.text) if _ending(line)), "\n")
    parts = []
    for cell in self._cells:
      number = cell.index + 1
      python, kept, skipped = _python(cell.text, f"{token} {cell.index}")
      if skipped is not None:
        self.notes.append(Note(number, 1, *_skipped(skipped, cell.text)))
        continue
      error = _syntax_error(python)
      if error is not None:
        line, message = error
        self.notes.append(Note(number, line, ERROR, (
            f"does not parse: {message}; this cell left unchanged, the "
            "others converted")))
        continue
      marker = f'"{token} cell {cell.index}"'
      ended = python.endswith(("\n", "\r"))
      parts += [marker, newline, python, "" if ended or not python else
                newline]
      self._kept.update(kept)
      first = next((line for line in _lines(cell.text) if line.strip()), "")
      magic = next(iter(kept.values())) if first.startswith("%%") else None
      self._joined.append(_Joined(cell, marker, ended, magic))
      self._lines.append(None)  # The marker's.
      self._lines += [(number, line)
                      for line in range(1, len(_lines(python)) + 1)]
    return "".join(parts)

  def where(self, line: int) -> tuple[int, int] | None:
    """(cell number, line in the cell) of a line of `python`, or None.

    Args:
      line: a 1-based line of `python` (a marker's line has none).
    """
    if 1 <= line <= len(self._lines):
      return self._lines[line - 1]
    return None

  def split(self, code: str) -> dict[int, str]:
    """The new source of each cell that `code` changes.

    Args:
      code: `python` converted: its marker lines as they were.

    Returns:
      {cell number: its new source}, for the cells whose source changed.

    Raises:
      ValueError: the markers are not each on a line of their own, in
        order (the conversion moved or changed one).
    """
    lines = _lines(code)
    starts = []
    at = 0
    for joined in self._joined:
      while at < len(lines) and lines[at].rstrip("\r\n") != joined.marker:
        at += 1
      if at == len(lines):
        raise ValueError(
            f"the converted text lost the marker of cell "
            f"{joined.cell.index + 1} ({joined.marker}): it cannot be "
            "split back into cells")
      starts.append(at)
      at += 1
    changed = {}
    ends = starts[1:] + [len(lines)]
    for joined, start, end in zip(self._joined, starts, ends):
      new = [self._kept.get(line.strip(), line)
             for line in lines[start + 1:end]]
      if joined.magic in new:
        # A line added above a cell magic (`%%time`) goes below it.
        first = next(i for i, line in enumerate(new) if line.strip())
        new.insert(first, new.pop(new.index(joined.magic)))
      if not joined.ended and new:
        last = new[-1]
        new[-1] = last[:len(last) - len(_ending(last))]
      text = "".join(new)
      if text != joined.cell.text:
        changed[joined.cell.index + 1] = text
    return changed

  def cells(self, changed: dict[int, str]) -> CellLines:
    """Where the lines of `python` lie, and which cell got an added line.

    Args:
      changed: what `split` returned for the converted text.
    """
    return CellLines(self, changed)

  def source(self, number: int) -> str:
    """The source of code cell `number` (from 1, every cell counted)."""
    return self._cells_by_number()[number].text

  def _cells_by_number(self) -> dict[int, _Cell]:
    return {cell.index + 1: cell for cell in self._cells}

  def encode(self, changed: dict[int, str]) -> bytes:
    """The notebook's bytes with the sources of `changed` cells replaced.

    Every other byte is the file's own: a notebook without changes is
    `data`.

    Args:
      changed: {cell number: its new source}, as `split` returns.
    """
    if not changed:
      return self.data
    cells = self._cells_by_number()
    pieces, at = [], 0
    for number in sorted(changed, key=lambda n: cells[n].start):
      cell = cells[number]
      pieces += [self._text[at:cell.start], self._source(cell,
                                                         changed[number])]
      at = cell.end
    pieces.append(self._text[at:])
    data = "".join(pieces).encode("utf-8")
    return _BOM + data if self.data.startswith(_BOM) else data

  def _source(self, cell: _Cell, text: str) -> str:
    """A cell's new source value, in the form and escaping of its old one."""
    new = _lines(text)
    if cell.items is None:
      raw = self._text[cell.start + 1:cell.end - 1]
      old = _raw_lines(raw)
      return '"' + "".join(self._reuse(old, new, quoted=False)) + '"'
    old = [(_DECODER.decode(self._text[s:e]), self._text[s:e])
           for s, e in cell.items]
    items = self._reuse(old, new, quoted=True)
    if not items:
      return "[]"
    opening, separator, closing = self._layout(cell)
    return "[" + opening + separator.join(items) + closing + "]"

  def _reuse(self, old: list[tuple[str, str]], new: list[str],
             quoted: bool) -> list[str]:
    """The raw JSON of each line of `new`: an unchanged line's own bytes.

    Args:
      old: (decoded, raw) of each old line, or of each old list item.
      new: the new lines.
      quoted: whether the raw text carries its quotes (a list's items).
    """
    matcher = difflib.SequenceMatcher(None, [d for d, _ in old], new,
                                      autojunk=False)
    raw = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
      if tag == "equal":
        raw += [r for _, r in old[i1:i2]]
      else:
        for line in new[j1:j2]:
          escaped = json.dumps(line, ensure_ascii=self._ascii)
          raw.append(escaped if quoted else escaped[1:-1])
    return raw

  def _layout(self, cell: _Cell) -> tuple[str, str, str]:
    """(after `[`, between items, before `]`) of a cell's list of lines."""
    text, items = self._text, cell.items
    if items:
      opening = text[cell.start + 1:items[0][0]]
      closing = text[items[-1][1]:cell.end - 1]
      if len(items) > 1:
        return opening, text[items[0][1]:items[1][0]], closing
      return opening, "," + opening, closing
    # `[]`: lay the items out as the file lays out its keys.
    if "\n" not in text.strip():
      return "", ",", ""
    line_start = text.rfind("\n", 0, cell.start) + 1
    indent = re.match(r"[ \t]*", text[line_start:]).group()
    first = re.search(r"\{\s*\n([ \t]*)\"", text)
    unit = first.group(1) if first else " "
    return (self._newline + indent + unit, "," + self._newline + indent +
            unit, self._newline + indent)


@dataclasses.dataclass(frozen=True)
class CellLines:
  """A notebook's lines, as the report names them (`report.Cells`)."""
  notebook: Notebook
  changed: dict[int, str]  # {cell number: new source}, as `split` returns.

  def where(self, line: int) -> tuple[int, int] | None:
    """(cell number, line in the cell) of a line of the joined text."""
    return self.notebook.where(line)

  def added(self, text: str) -> int | None:
    """The first cell with more lines `text` (stripped) than it had."""
    for number, new in sorted(self.changed.items()):
      old = self.notebook.source(number)
      if (sum(line.strip() == text for line in _lines(new)) >
          sum(line.strip() == text for line in _lines(old))):
        return number
    return None


def read(data: bytes) -> Notebook:
  """Reads a notebook's bytes.

  Args:
    data: the file's bytes (UTF-8, as nbformat writes them).

  Raises:
    NotebookError: they are not UTF-8, not JSON, or not an nbformat 4
      notebook (a message that says which, and where).
  """
  body = data[len(_BOM):] if data.startswith(_BOM) else data
  try:
    text = body.decode("utf-8")
  except UnicodeDecodeError as e:
    raise NotebookError(body.count(b"\n", 0, e.start) + 1, (
        f"is not UTF-8 (byte 0x{body[e.start]:02x}), as a notebook must "
        "be")) from None
  try:
    notebook = json.loads(text)
  except json.JSONDecodeError as e:
    raise NotebookError(e.lineno, (
        f"is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})")
                        ) from None
  except RecursionError:
    raise NotebookError(None, "is not a notebook: its JSON is nested too "
                        "deep to read") from None
  _check(notebook)
  return Notebook(data, text, _code_cells(text, notebook),
                  _language(notebook))


def _check(notebook) -> None:
  """Raises NotebookError unless `notebook` is an nbformat 4 notebook."""
  if not isinstance(notebook, dict):
    raise NotebookError(None, (
        "is not a notebook: its JSON is a "
        f"{type(notebook).__name__}, not an object"))
  version = notebook.get("nbformat")
  if version != 4:
    hint = (" (open it in Jupyter and save it to make it nbformat 4)"
            if isinstance(version, int) and version < 4 else "")
    raise NotebookError(None, (
        f"is not an nbformat 4 notebook: its nbformat is {version!r}, the "
        f"upgrade reads 4{hint}"))
  cells = notebook.get("cells")
  if not isinstance(cells, list):
    raise NotebookError(None, (
        "is not an nbformat 4 notebook: 'cells' must be a list. Received: "
        f"{type(cells).__name__}"))
  for number, cell in enumerate(cells, start=1):
    if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"),
                                                    str):
      raise NotebookError(None, (
          f"is not an nbformat 4 notebook: cell {number} is not an object "
          "with a 'cell_type'"))
    source = cell.get("source")
    if not (isinstance(source, str) or isinstance(source, list) and all(
        isinstance(line, str) for line in source)):
      raise NotebookError(None, (
          f"is not an nbformat 4 notebook: the 'source' of cell {number} "
          "must be a string or a list of strings. Received: "
          f"{type(source).__name__}"))


def _language(notebook: dict) -> str | None:
  """The notebook's language when it is named and not Python, else None."""
  metadata = notebook.get("metadata")
  if not isinstance(metadata, dict):
    return None
  for key, field in (("language_info", "name"), ("kernelspec", "language")):
    value = metadata.get(key)
    if isinstance(value, dict) and isinstance(value.get(field), str):
      name = value[field]
      return None if name.lower() in ("python", "python3", "ipython",
                                      "ipython3") else name
  return None


def _code_cells(text: str, notebook: dict) -> list[_Cell]:
  """The code cells, with the span of each one's source in `text`."""
  top = _members(text, _skip(text, 0))
  spans = _items(text, top["cells"][0])
  found = []
  for index, (cell, (start, _)) in enumerate(zip(notebook["cells"], spans)):
    if cell["cell_type"] != "code":
      continue
    value_start, value_end = _members(text, start)["source"]
    items = (tuple(_items(text, value_start))
             if text[value_start] == "[" else None)
    source = cell["source"]
    found.append(_Cell(index, value_start, value_end,
                       source if isinstance(source, str) else
                       "".join(source), items))
  return found


def _skip(text: str, at: int) -> int:
  while at < len(text) and text[at] in _WHITESPACE:
    at += 1
  return at


def _end(text: str, at: int) -> int:
  """Where the JSON value starting at `at` ends."""
  return _DECODER.raw_decode(text, at)[1]


def _members(text: str, at: int) -> dict[str, tuple[int, int]]:
  """{key: (start, end) of its value} of the JSON object at `at`.

  A key given twice has the span of its last value, as `json.loads` keeps.
  """
  spans = {}
  at = _skip(text, at + 1)  # After `{`.
  while text[at] != "}":
    key, at = _DECODER.raw_decode(text, at)
    at = _skip(text, _skip(text, at) + 1)  # After `:`.
    end = _end(text, at)
    spans[key] = (at, end)
    at = _skip(text, end)
    if text[at] == ",":
      at = _skip(text, at + 1)
  return spans


def _items(text: str, at: int) -> list[tuple[int, int]]:
  """The (start, end) of each value of the JSON array at `at`."""
  spans = []
  at = _skip(text, at + 1)  # After `[`.
  while text[at] != "]":
    end = _end(text, at)
    spans.append((at, end))
    at = _skip(text, end)
    if text[at] == ",":
      at = _skip(text, at + 1)
  return spans


def _lines(text: str) -> list[str]:
  """`text`'s lines with their endings (`\\n`, `\\r\\n` or `\\r`)."""
  return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text)


def _ending(line: str) -> str:
  return line[len(line.rstrip("\r\n")):]


def _raw_lines(raw: str) -> list[tuple[str, str]]:
  """(decoded, raw) of each line of a JSON string's raw text, no quotes."""
  lines, start, at = [], 0, 0
  while at < len(raw):
    if raw[at] != "\\":
      at += 1
      continue
    escape = raw[at + 1]
    at += 6 if escape == "u" else 2
    if escape == "n":
      lines.append(raw[start:at])
      start = at
  if start < len(raw):
    lines.append(raw[start:])
  return [(json.loads(f'"{piece}"'), piece) for piece in lines]


def _python(text: str, token: str
            ) -> tuple[str, dict[str, str], str | None]:
  """A cell's text with each IPython line a string statement.

  Returns:
    (the Python text, {placeholder: the line it stands for}, the cell
    magic that leaves the whole cell alone or None).
  """
  lines = _lines(text)
  kept, out = {}, []

  def keep(line: str, indent: str) -> None:
    placeholder = f'"{token} {len(kept)}"'
    kept[placeholder] = line
    out.append(indent + placeholder + _ending(line))

  first = next((i for i, line in enumerate(lines) if line.strip()), None)
  if first is not None and lines[first].startswith("%%"):
    name = re.match(r"%%(\S*)", lines[first]).group(1)
    if name not in PYTHON_CELL_MAGICS:
      return text, {}, name
    out += lines[:first]
    keep(lines[first], "")
    lines = lines[first + 1:]
  quote, depth, continued, shell = None, 0, False, None
  for line in lines:
    if shell is not None:  # A line a shell or magic line continues onto.
      keep(line, shell)
      if not line.rstrip("\r\n").endswith("\\"):
        shell = None
      continue
    if quote is None and depth == 0 and not continued and _ipython(line):
      indent = line[:len(line) - len(line.lstrip(" \t"))]
      keep(line, indent)
      if line.rstrip("\r\n").endswith("\\"):
        shell = indent
      continue
    out.append(line)
    quote, depth, continued = _scan(line, quote, depth)
  return "".join(out), kept, None


def _ipython(line: str) -> bool:
  """Whether a line that starts a statement is IPython's, not Python's."""
  body = line.strip()
  if not body:
    return False
  if body[0] in "!%?/,;":
    return True
  if _ASSIGNED.match(body) or _HELP_END.fullmatch(body):
    return True
  word = _AUTOMAGIC_LINE.match(body)
  return bool(word and word.group(1) in _AUTOMAGIC and
              _syntax_error(body) is not None)


def _scan(line: str, quote: str | None, depth: int
          ) -> tuple[str | None, int, bool]:
  """Python's tokenizer state after `line`, as far as lines go.

  Returns:
    (the quote of a string still open, the depth of brackets still open,
    whether a backslash continues the line).
  """
  at, length = 0, len(line)
  while at < length:
    char = line[at]
    if quote is not None:
      if char == "\\":
        at += 2
      elif line.startswith(quote, at):
        at += len(quote)
        quote = None
      else:
        at += 1
      continue
    if char == "#":
      return None, depth, False
    if char in "'\"":
      quote = char * 3 if line.startswith(char * 3, at) else char
      at += len(quote)
      continue
    if char in "([{":
      depth += 1
    elif char in ")]}":
      depth = max(depth - 1, 0)
    at += 1
  if quote is not None and len(quote) == 1 and not line.rstrip(
      "\r\n").endswith("\\"):
    quote = None  # Not closed on its line: Python says so.
  continued = quote is None and line.rstrip("\r\n").endswith("\\")
  return quote, depth, continued


def _syntax_error(text: str) -> tuple[int | None, str] | None:
  """(line, message) of the reason Python cannot parse `text`, or None."""
  try:
    ast.parse(text)
  except SyntaxError as e:
    return e.lineno, e.msg
  except (ValueError, RecursionError, MemoryError) as e:
    return None, f"{type(e).__name__}: {e}"
  return None


def _skipped(magic: str, text: str) -> tuple[str, str]:
  """(severity, message) for a cell whose cell magic leaves it alone."""
  what = f"a `%%{magic}` cell is not Python: left as it is"
  target = re.match(r"%%(?:writefile|file)(?:\s+-a)?\s+(\S+\.py)\b",
                    text.lstrip())
  if target and any(word in text for word in names.WORDS):
    return WARNING, (
        f"a `%%{magic}` cell writes the Python file {target.group(1)!r}, "
        "which names legacy spellings: left as it is; convert that file "
        "once written (--infile)")
  return INFO, what
