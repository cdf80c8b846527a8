-- abort: PREPARING -> OWNED; the unsealed offer goes (the source still holds its copy).
if not held() then return fenced() end
if field('state') ~= 'PREPARING' then return reply('STATE') end
return to_owned()
