-- wrk script: every request carries the next token of a pool of distinct
-- tokens (TOKENS_FILE, one a line), so the gateway's verified-token cache
-- misses: the pool is larger than the cache, and the harness starts each
-- run where the previous one stopped (TOKENS_OFFSET). Requests are
-- formatted once in init, so wrk's own cost per request stays that of a
-- plain run.
local reqs = {}
local i = 0

function init(args)
	local path = os.getenv("TOKENS_FILE")
	local headers = {}
	for k, v in pairs(wrk.headers) do headers[k] = v end
	for line in io.lines(path) do
		headers["Authorization"] = "Bearer " .. line
		reqs[#reqs + 1] = wrk.format(nil, nil, headers)
	end
	i = tonumber(os.getenv("TOKENS_OFFSET") or "0") % #reqs
end

function request()
	i = i + 1
	if i > #reqs then i = 1 end
	return reqs[i]
end
