-- commit: CLAIMED -> OWNED; only now is the data deleted (the caller holds it).
if not held() then return fenced() end
if field('state') ~= 'CLAIMED' then return reply('STATE') end
return to_owned()
