// The customer portal's only script. Each action opens a panel; its form calls the JSON
// routes under this page's own URL (the token in the path is the credential, so no cookie and
// nothing to forge), with an Idempotency-Key per submission so a repeated click is one action;
// the page then reloads to show the result and says what happened. A new card or Nequi account
// is tokenized directly with the processor using the account's public key, as on the hosted
// checkout: card numbers never reach our server. No dependencies.
(function () {
  "use strict";
  var root = document.getElementById("portal");
  if (!root) return;
  var d = root.dataset;
  // The page reloads after each action: start at the top, where the notice says what happened.
  if ("scrollRestoration" in history) history.scrollRestoration = "manual";
  var NOTICE = "portal-notice";
  var NEQUI_POLL_MS = 1500, NEQUI_WAIT_MS = 3 * 60 * 1000;
  var acceptance = null, personalAuth = null, documentsAsked = false;
  var current = null; // the subscription the open panel is about
  var prorationDate = null; // the shown preview's instant: the switch is charged what it said

  function $(id) { return document.getElementById(id); }
  function digits(s) { return (s || "").replace(/\D/g, ""); }
  function later(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }
  function key() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return String(Date.now()) + Math.random().toString(16).slice(2);
  }
  function json(response) {
    return response.text().then(function (text) {
      var body = null;
      try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
      return { status: response.status, body: body };
    });
  }
  function money(cents) {
    var whole = Math.floor(Math.abs(cents) / 100), frac = String(Math.abs(cents) % 100).padStart(2, "0");
    var sep = d.lang === "en" ? "," : ".", dec = d.lang === "en" ? "." : ",";
    var grouped = String(whole).replace(/\B(?=(\d{3})+(?!\d))/g, sep);
    return (d.lang === "en" ? "COP " : "$ ") + grouped + dec + frac;
  }

  // Calls our JSON under the session's token. 401: the hour is over.
  function api(method, path, body, idempotency) {
    var headers = { "Content-Type": "application/json" };
    if (idempotency) headers["Idempotency-Key"] = idempotency;
    return fetch(d.base + "/api" + path, {
      method: method, headers: headers, body: body === undefined ? undefined : JSON.stringify(body)
    }).then(json).then(function (r) {
      if (r.status === 401) { notice(d.errExpired, true); throw new Error("expired"); }
      return r;
    });
  }

  function notice(message, bad) {
    var n = $("notice");
    n.textContent = message;
    n.className = bad ? "notice bad" : "notice";
    n.hidden = false;
    n.focus();
  }
  // Reloads to show the new state, with `message` said once the page is back.
  function reloadSaying(message) {
    try { sessionStorage.setItem(NOTICE, message); } catch (e) { /* private mode: no notice */ }
    window.location.reload();
  }
  // Back from an action: say what happened (and do not open the session's flow again).
  var restored = false;
  try {
    var said = sessionStorage.getItem(NOTICE);
    if (said) { sessionStorage.removeItem(NOTICE); notice(said, false); restored = true; }
  } catch (e) { /* no storage */ }

  function setError(id, message) {
    var slot = $(id + "-error"), input = $(id);
    if (slot) slot.textContent = message || "";
    if (input) input.setAttribute("aria-invalid", message ? "true" : "false");
  }
  function errorOf(r) { return (r.body && r.body.error) || {}; }

  // Panels ---------------------------------------------------------------------------------
  function closePanels() {
    ["method", "cancel", "switch"].forEach(function (p) { $("panel-" + p).hidden = true; });
  }
  function open(panel, sub) {
    closePanels();
    current = sub;
    var article = $("sub-" + sub);
    if (panel === "cancel" && $("cancel-until") && article) $("cancel-until").textContent = article.dataset.periodEnd;
    if (panel === "method") loadDocuments();
    if (panel === "switch") preview();
    var section = $("panel-" + panel);
    if (article) article.after(section);
    section.hidden = false;
    section.focus();
  }
  Array.prototype.forEach.call(document.querySelectorAll("button.open"), function (b) {
    b.addEventListener("click", function () { open(b.dataset.panel, b.dataset.sub); });
  });
  Array.prototype.forEach.call(document.querySelectorAll("button.close"), function (b) {
    b.addEventListener("click", function () {
      closePanels();
      var opener = document.querySelector("button.open[data-sub='" + current + "']");
      if (opener) opener.focus();
    });
  });

  // Payment method -------------------------------------------------------------------------
  function kind() { return $("kind-nequi").checked ? "nequi" : "card"; }
  function accepted() { return $("accept-terms").checked && $("accept-personal-data").checked; }
  function refreshSave() { $("method-save").disabled = !(acceptance && personalAuth && accepted()); }
  function showKind() {
    $("card-fields").hidden = kind() === "nequi";
    $("nequi-fields").hidden = kind() !== "nequi";
  }
  $("kind-card").addEventListener("change", showKind);
  $("kind-nequi").addEventListener("change", showKind);
  $("accept-terms").addEventListener("change", refreshSave);
  $("accept-personal-data").addEventListener("change", refreshSave);
  $("card-number").addEventListener("input", function (e) {
    e.target.value = digits(e.target.value).slice(0, 19).replace(/(\d{4})(?=\d)/g, "$1 ");
  });
  $("card-expiry").addEventListener("input", function (e) {
    var v = digits(e.target.value).slice(0, 4);
    e.target.value = v.length > 2 ? v.slice(0, 2) + "/" + v.slice(2) : v;
  });

  function web(url) { return /^https?:\/\//.test(url || "") ? url : "#"; }
  function loadDocuments() {
    if (documentsAsked) return;
    documentsAsked = true;
    fetch(d.processor + "/merchants/info", { headers: { "x-merchant-public-key": d.key } })
      .then(json)
      .then(function (r) {
        var data = r.body && r.body.data;
        var policy = data && data.presigned_acceptance, personal = data && data.presigned_personal_data_auth;
        if (r.status !== 200 || !policy || !personal) throw new Error("documents");
        $("terms-link").href = web(policy.permalink);
        $("personal-data-link").href = web(personal.permalink);
        acceptance = policy.acceptance_token;
        personalAuth = personal.acceptance_token;
        refreshSave();
      })
      .catch(function () { documentsAsked = false; $("method-error").textContent = d.errTerms; });
  }

  function luhn(n) {
    if (!/^\d{12,19}$/.test(n)) return false;
    var sum = 0;
    for (var i = 0; i < n.length; i++) {
      var x = +n[n.length - 1 - i];
      if (i % 2 === 1) { x *= 2; if (x > 9) x -= 9; }
      sum += x;
    }
    return sum % 10 === 0;
  }
  function expiry(raw) {
    var m = /^\s*(\d{1,2})\s*\/?\s*(\d{2}|\d{4})\s*$/.exec(raw || "");
    if (!m) return null;
    var month = +m[1], year = m[2].length === 2 ? 2000 + +m[2] : +m[2], now = new Date();
    if (month < 1 || month > 12) return null;
    if (year < now.getFullYear() || (year === now.getFullYear() && month < now.getMonth() + 1)) return null;
    return { month: (month < 10 ? "0" : "") + month, year: String(year % 100).padStart(2, "0") };
  }
  function phone() { var v = digits($("nequi-phone").value); return /^3\d{9}$/.test(v) ? v : null; }

  function validCard() {
    var ok = true;
    function check(id, valid, message) { setError(id, valid ? "" : message); if (!valid && ok) { ok = false; $(id).focus(); } }
    if (kind() === "nequi") { check("nequi-phone", phone() !== null, d.errPhone); return ok; }
    check("card-number", luhn(digits($("card-number").value)), d.errCard);
    check("card-expiry", expiry($("card-expiry").value) !== null, d.errExpiry);
    check("card-cvc", /^\d{3,4}$/.test($("card-cvc").value.trim()), d.errCvc);
    check("card-holder", $("card-holder").value.trim().length >= 5, d.errHolder);
    return ok;
  }

  function cardToken() {
    var exp = expiry($("card-expiry").value);
    return fetch(d.processor + "/tokens/cards", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Authorization": "Bearer " + d.key },
      body: JSON.stringify({
        number: digits($("card-number").value), cvc: $("card-cvc").value.trim(),
        exp_month: exp.month, exp_year: exp.year, card_holder: $("card-holder").value.trim()
      })
    }).then(json).then(function (t) {
      if (t.status !== 201 || !t.body || !t.body.data) throw new Error("token");
      return { type: "card", card_token: t.body.data.id };
    });
  }

  // A Nequi token the customer approves in the app: resolves once approved.
  function nequiToken() {
    return fetch(d.processor + "/tokens/nequi", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Authorization": "Bearer " + d.key },
      body: JSON.stringify({ phone_number: phone() })
    }).then(json).then(function (t) {
      var token = t.status === 201 && t.body && t.body.data;
      if (!token || !token.id) throw new Error("token");
      $("method-status").textContent = d.nequiWaiting;
      var deadline = Date.now() + NEQUI_WAIT_MS;
      function poll() {
        if (Date.now() > deadline) { $("method-status").textContent = ""; throw new Error("declined"); }
        return later(NEQUI_POLL_MS).then(function () {
          return fetch(d.processor + "/tokens/nequi/" + encodeURIComponent(token.id), {
            headers: { "Authorization": "Bearer " + d.key }
          }).then(json);
        }).then(function (r) {
          var status = r.status === 200 && r.body && r.body.data && r.body.data.status;
          if (status === "APPROVED") { $("method-status").textContent = d.saving; return { type: "nequi", nequi_token: token.id }; }
          if (status === "DECLINED") { $("method-status").textContent = ""; throw new Error("declined"); }
          return poll();
        }, function () { return poll(); });
      }
      return poll();
    });
  }

  $("method-form").addEventListener("submit", function (e) {
    e.preventDefault();
    if ($("method-save").disabled || !validCard()) return;
    var button = $("method-save"), label = button.textContent, idem = key();
    button.disabled = true;
    button.textContent = d.saving;
    $("method-error").textContent = "";
    (kind() === "nequi" ? nequiToken() : cardToken())
      .then(function (source) {
        source.acceptance_token = acceptance;
        source.accept_personal_auth = personalAuth;
        return api("POST", "/subscriptions/" + encodeURIComponent(current) + "/payment-method", source, idem);
      })
      .then(function (r) {
        if (r.status === 200) {
          var charge = r.body.charge;
          if (charge && charge.status === "approved") reloadSaying(d.doneRecovered);
          else if (charge && charge.status !== "pending") reloadSaying(d.doneDeclined);
          else reloadSaying(d.doneMethod);
          return;
        }
        var error = errorOf(r);
        $("method-status").textContent = "";
        $("method-error").textContent = error.type === "processor_error" ? d.errDeclined : (error.message || d.errNetwork);
        button.disabled = false;
        button.textContent = label;
      })
      .catch(function (err) {
        if (err && err.message === "expired") return;
        $("method-status").textContent = "";
        $("method-error").textContent = err && err.message === "declined" ? d.errDeclined : d.errNetwork;
        button.disabled = false;
        button.textContent = label;
        refreshSave();
      });
  });

  // Cancel ---------------------------------------------------------------------------------
  $("cancel-form").addEventListener("submit", function (e) {
    e.preventDefault();
    var button = $("cancel-confirm"), idem = key();
    button.disabled = true;
    api("POST", "/subscriptions/" + encodeURIComponent(current) + "/cancel",
      { reason: $("cancel-reason").value.trim() || null }, idem)
      .then(function (r) {
        if (r.status === 200) { reloadSaying(d.doneCancel); return; }
        $("cancel-error").textContent = errorOf(r).message || d.errNetwork;
        button.disabled = false;
      })
      .catch(function (err) { if (!err || err.message !== "expired") $("cancel-error").textContent = d.errNetwork; button.disabled = false; });
  });

  // Plan switch ----------------------------------------------------------------------------
  function preview() {
    var plan = $("switch-plan").value;
    $("switch-confirm").disabled = true;
    $("switch-preview").textContent = "";
    $("switch-error").textContent = "";
    if (!plan || !current) return;
    api("POST", "/subscriptions/" + encodeURIComponent(current) + "/change-plan/preview", { plan_id: plan })
      .then(function (r) {
        if (r.status !== 200) { $("switch-error").textContent = errorOf(r).message || d.errNetwork; return; }
        prorationDate = r.body.proration_date;
        $("switch-preview").textContent = r.body.immediate_charge
          ? d.chargedNow + ": " + money(r.body.prorated_amount_cents)
          : d.nothingNow;
        $("switch-confirm").disabled = false;
      })
      .catch(function () { /* said by api() or left for a retry */ });
  }
  $("switch-plan").addEventListener("change", preview);
  $("switch-form").addEventListener("submit", function (e) {
    e.preventDefault();
    var button = $("switch-confirm"), idem = key();
    button.disabled = true;
    button.textContent = d.saving;
    api("POST", "/subscriptions/" + encodeURIComponent(current) + "/change-plan", { plan_id: $("switch-plan").value, proration_date: prorationDate }, idem)
      .then(function (r) {
        if (r.status === 200 || r.status === 202) { reloadSaying(d.doneSwitch); return; }
        var error = errorOf(r);
        $("switch-error").textContent = error.type === "processor_error" ? d.errDeclined : (error.message || d.errNetwork);
        button.disabled = false;
      })
      .catch(function (err) { if (!err || err.message !== "expired") $("switch-error").textContent = d.errNetwork; button.disabled = false; });
  });

  // Invoicing data -------------------------------------------------------------------------
  var FIELD = { tax_id: "tax-id-number", legal_name: "legal-name", address: "address-line" };
  $("invoicing-form").addEventListener("submit", function (e) {
    e.preventDefault();
    ["tax-id-number", "legal-name", "address-line", "city-code"].forEach(function (id) { setError(id, ""); });
    $("invoicing-error").textContent = "";
    var body = {}, number = $("tax-id-number").value.trim(), name = $("legal-name").value.trim();
    var line = $("address-line").value.trim(), city = $("city-code").value.trim();
    if (number) body.tax_id = { type: $("tax-id-type").value, number: number };
    if (name) body.legal_name = name;
    if (line || city) body.address = { line: line, city_code: city, country: "CO" };
    var button = $("invoicing-save");
    button.disabled = true;
    api("PATCH", "/customer", body)
      .then(function (r) {
        button.disabled = false;
        if (r.status === 200) { notice(d.saved, false); return; }
        var error = errorOf(r), param = error.param || "";
        var target = param.indexOf("city_code") >= 0 ? "city-code" : FIELD[param.split(".")[0]];
        if (target) { setError(target, error.message); $(target).focus(); }
        else $("invoicing-error").textContent = error.message || d.errNetwork;
      })
      .catch(function (err) { button.disabled = false; if (!err || err.message !== "expired") $("invoicing-error").textContent = d.errNetwork; });
  });

  showKind();
  // A session opened on one action: that panel, for that subscription.
  var flows = { payment_method_update: "method", subscription_cancel: "cancel" };
  if (!restored && d.flow && flows[d.flow] && $("sub-" + d.flowSubscription)) open(flows[d.flow], d.flowSubscription);
})();
