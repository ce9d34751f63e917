-- wrk script: every request goes to one of PATHS distinct paths (default
-- 100000), so a permission cache keyed on {path} misses and the
-- single-flight of concurrent identical checks cannot merge them.
local reqs = {}
local i = 0

function init(args)
	local n = tonumber(os.getenv("PATHS") or "100000")
	for k = 1, n do
		reqs[k] = wrk.format(nil, "/items/" .. k)
	end
	i = math.random(n)
end

function request()
	i = i + 1
	if i > #reqs then i = 1 end
	return reqs[i]
end
