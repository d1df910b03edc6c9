"""Moves the comments of replaced code onto what replaces it.

A chain split over lines inside brackets may hold comments
(`tf.train.experimental.  # why` then `MixedPrecisionLossScaleOptimizer`),
and so may the aliases of a parenthesized import. The upgrade replaces such
code with freshly parsed text, which has none: these helpers carry them.
"""

from __future__ import annotations

import libcst as cst


class _Comments(cst.CSTVisitor):
  """Collects every comment below a node, in the order of the source."""

  def __init__(self):
    super().__init__()
    self.found: list[str] = []
    self.breaks: list[cst.ParenthesizedWhitespace] = []

  def visit_Comment(self, node: cst.Comment) -> None:
    """Keeps the comment's text."""
    self.found.append(node.value)

  def visit_ParenthesizedWhitespace(
      self, node: cst.ParenthesizedWhitespace) -> None:
    """Keeps a line break inside the node."""
    self.breaks.append(node)


def inside(node: cst.CSTNode) -> list[str]:
  """The comments (`# ...`) within `node`, in order."""
  visitor = _Comments()
  node.visit(visitor)
  return visitor.found


def carry(old: cst.CSTNode, new: cst.BaseExpression) -> cst.BaseExpression:
  """`new` with the comments of `old`, which it replaces inside brackets.

  They go after the last dot of `new` (`mplso.  # why` then the member on
  the next line), or after an opening parenthesis put around a bare name;
  `new` is put in parentheses where the brackets were `old`'s own (a call
  such as `getattr(...)`, or parentheses around the chain). `new` comes
  back as it is when `old` has none.
  """
  visitor = _Comments()
  old.visit(visitor)
  found = visitor.found
  if not found:
    return new
  last = visitor.breaks[-1]  # A comment ends a line: there is a break.
  whitespace = cst.ParenthesizedWhitespace(
      first_line=cst.TrailingWhitespace(
          whitespace=cst.SimpleWhitespace("  "),
          comment=cst.Comment(found[0])),
      empty_lines=[cst.EmptyLine(indent=last.indent,
                                 whitespace=last.last_line,
                                 comment=cst.Comment(text))
                   for text in found[1:]],
      indent=last.indent, last_line=last.last_line)
  if not isinstance(new, cst.Attribute):
    return new.with_changes(
        lpar=[cst.LeftParen(whitespace_after=whitespace), *new.lpar],
        rpar=[*new.rpar, cst.RightParen()])
  new = new.with_changes(dot=cst.Dot(whitespace_after=whitespace))
  if isinstance(old, cst.Call) or getattr(old, "lpar", None):
    # The brackets that allowed the line break were `old`'s own.
    new = new.with_changes(lpar=[cst.LeftParen(), *new.lpar],
                           rpar=[*new.rpar, cst.RightParen()])
  return new


def own_comments(statement: cst.ImportFrom,
                 alias: cst.ImportAlias) -> tuple[list[str], str | None]:
  """The comments of one alias of a parenthesized `from ... import (...)`.

  Returns (the comment lines above it, the comment after it on its line):
  the lines are those after the previous comma (or after the opening
  parenthesis), the trailing one the comment after its own comma (after the
  closing parenthesis's line for the last alias without a comma).
  """
  aliases = list(statement.names)
  index = next(i for i, a in enumerate(aliases) if a is alias)
  if index == 0:
    before = statement.lpar.whitespace_after if statement.lpar else None
  else:
    comma = aliases[index - 1].comma
    before = comma.whitespace_after if isinstance(comma, cst.Comma) else None
  above = []
  if isinstance(before, cst.ParenthesizedWhitespace):
    above = [line.comment.value for line in before.empty_lines
             if line.comment is not None]
    if index == 0 and before.first_line.comment is not None:
      above.insert(0, before.first_line.comment.value)
  trailing = None
  after = (alias.comma.whitespace_after
           if isinstance(alias.comma, cst.Comma) else
           statement.rpar.whitespace_before if statement.rpar else None)
  if isinstance(after, cst.ParenthesizedWhitespace):
    trailing = (after.first_line.comment.value
                if after.first_line.comment is not None else None)
  return above, trailing


def with_comments(statement: cst.SimpleStatementLine, above: list[str],
                  trailing: str | None) -> cst.SimpleStatementLine:
  """`statement` with comment lines above it and a comment after it."""
  if above:
    statement = statement.with_changes(leading_lines=[
        *statement.leading_lines,
        *(cst.EmptyLine(comment=cst.Comment(text)) for text in above)])
  if trailing is not None:
    statement = statement.with_changes(
        trailing_whitespace=cst.TrailingWhitespace(
            whitespace=cst.SimpleWhitespace("  "),
            comment=cst.Comment(trailing)))
  return statement


def in_place_of(line: cst.SimpleStatementLine,
                statements: list[cst.SimpleStatementLine]
                ) -> list[cst.SimpleStatementLine]:
  """`statements`, to stand where `line` stood, with its comments.

  The lines above `line` go above the first statement; the comment at the
  end of `line` goes at the end of the last (above it, where the last has
  one of its own).
  """
  statements = list(statements)
  statements[0] = statements[0].with_changes(leading_lines=[
      *line.leading_lines, *statements[0].leading_lines])
  end = line.trailing_whitespace
  if end.comment is not None:
    last = statements[-1]
    if last.trailing_whitespace.comment is not None:
      last = with_comments(last, [last.trailing_whitespace.comment.value],
                           None)
    statements[-1] = last.with_changes(trailing_whitespace=end)
  return statements
