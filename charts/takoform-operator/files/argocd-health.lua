-- Argo CD health check for every Takoform Form CR (Lua 5.1, as Argo CD's gopher-lua runs it).
-- Install: docs/argocd-health.md (one argocd-cm key per Form line, generated).
--
--   takoform.io/paused: "true"                  -> Suspended (no host calls while paused)
--   Blocked=True                                -> Degraded  (a human must choose; the message
--                                                             names the remedy)
--   status.observedGeneration < generation      -> Progressing (the operator has not seen the spec)
--   Degraded=True                               -> Degraded
--   managementPolicy Observe and Drifted=True   -> Suspended (drift reported, never repaired:
--                                                             waits for a human)
--   Ready=True                                  -> Healthy
--   Drifted / Reconciling / pending operation   -> Progressing
--   no status yet, or anything else             -> Progressing
local health = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, item in ipairs(obj.status.conditions) do
    if item.type == kind then
      return item
    end
  end
  return nil
end

local function holds(item)
  return item ~= nil and item.status == "True"
end

local function describe(item)
  local text = item.type
  if item.reason ~= nil and item.reason ~= "" then
    text = text .. " " .. item.reason
  end
  if item.message ~= nil and item.message ~= "" then
    text = text .. ": " .. item.message
  end
  return text
end

local function answer(status, message)
  health.status = status
  health.message = message
  return health
end

local annotations = nil
if obj.metadata ~= nil then
  annotations = obj.metadata.annotations
end
if annotations ~= nil and annotations["takoform.io/paused"] == "true" then
  return answer("Suspended", "reconciliation is paused (annotation takoform.io/paused)")
end

if obj.status == nil or obj.status.conditions == nil then
  return answer("Progressing", "waiting for the operator to report a status")
end

local blocked = condition("Blocked")
if holds(blocked) then
  return answer("Degraded", describe(blocked))
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  return answer("Progressing", "waiting for the operator to observe generation " .. generation)
end

local degraded = condition("Degraded")
if holds(degraded) then
  return answer("Degraded", describe(degraded))
end

local ready = condition("Ready")
local drifted = condition("Drifted")
local observe_only = obj.spec ~= nil and obj.spec.managementPolicy == "Observe"
if holds(drifted) and observe_only then
  return answer("Suspended", "observed only, not repaired: " .. describe(drifted))
end
if holds(ready) then
  return answer("Healthy", describe(ready))
end

if holds(drifted) then
  return answer("Progressing", describe(drifted))
end
local reconciling = condition("Reconciling")
if holds(reconciling) then
  return answer("Progressing", describe(reconciling))
end
if obj.status.pendingOperationId ~= nil then
  return answer("Progressing", "host operation " .. obj.status.pendingOperationId .. " is pending")
end
if ready ~= nil then
  return answer("Progressing", describe(ready))
end
return answer("Progressing", "waiting for Ready")
