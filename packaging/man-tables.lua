-- pandoc filter for the man pages (packaging/ManPage.cmake). The docs' tables are pipe tables with equal
-- dashes, which pandoc renders as equal columns: the long "why" column gets a few words a line and long
-- keys overflow theirs. Size every column but the last to its longest word (a key, a default value), within
-- limits, and give the last one what remains of the line.
local function cells_of(row)
  return row.cells or row[2]
end

local function longest_words(t)
  local need = {}
  local function scan(rows)
    for _, row in ipairs(rows) do
      for i, cell in ipairs(cells_of(row)) do
        for word in pandoc.utils.stringify(cell.contents or cell[5] or cell):gmatch("%S+") do
          need[i] = math.max(need[i] or 0, #word)
        end
      end
    end
  end
  scan(t.head.rows or t.head[2])
  for _, body in ipairs(t.bodies) do scan(body.body or body[4]) end
  return need
end

function Table(t)
  local n = #t.colspecs
  if n < 2 then return nil end
  local need, line, used = longest_words(t), 66, 0
  local widths = {}
  for i = 1, n - 1 do
    widths[i] = math.min(math.max(need[i] or 4, 4), 24) + 2
    used = used + widths[i]
  end
  local last = math.max(line - used, 24)
  local scale = line / (used + last)
  for i = 1, n do
    t.colspecs[i] = {t.colspecs[i][1], ((i < n) and widths[i] or last) * scale / line * 0.8}
  end
  return t
end
