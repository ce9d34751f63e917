-- wrk script: every request is a POST of the JSON document in BODY_FILE
-- (configs/post-body.json, 982 bytes) with Content-Type application/json:
-- the rows gw-fast-post and gw-fast-openapi-body.
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
