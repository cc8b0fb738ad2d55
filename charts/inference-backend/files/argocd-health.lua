-- Argo CD health check for serving.inferencebackend.io/InferenceBackend (Lua 5.1, as Argo CD runs it).
-- Healthy: the operator observed this generation and the Ready condition is True with phase Ready.
-- Degraded: phase Failed or Degraded, or BackendSelected is False (the spec cannot be served as written).
-- Progressing: anything else (not yet observed, deploying, waiting for replicas).
local hs = {}
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the inference-backend operator"
  return hs
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration ~= nil and obj.status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end
local ready = nil
local selected = nil
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Ready" then
    ready = condition
  elseif condition.type == "BackendSelected" then
    selected = condition
  end
end
local phase = obj.status.phase
if phase == "Failed" or phase == "Degraded" or (selected ~= nil and selected.status == "False") then
  hs.status = "Degraded"
  local why = selected ~= nil and selected.status == "False" and selected or ready
  hs.message = (why ~= nil and why.message) or ("phase " .. tostring(phase))
  return hs
end
if ready ~= nil and ready.status == "True" and phase == "Ready" then
  hs.status = "Healthy"
  hs.message = (obj.status.backend or "engine") .. ": " .. (ready.message or "ready")
  return hs
end
hs.status = "Progressing"
hs.message = (ready ~= nil and ready.message) or ("phase " .. tostring(phase))
return hs
