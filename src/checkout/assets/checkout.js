// The hosted checkout's only script. It loads the processor's two documents (end-user policy
// and personal-data authorization) and keeps Pay disabled until the customer accepts both; it
// validates the form; it gets a payment token directly from the processor with the account's
// public key (a card token, or a Nequi token the customer approves in the Nequi app), so that
// card numbers and phone numbers never reach our server; then it asks our server to complete
// the session with the token and both acceptances. No dependencies.
(function () {
  "use strict";
  var root = document.getElementById("checkout");
  if (!root) return;
  var d = root.dataset;
  var form = document.getElementById("pay-form");
  var button = document.getElementById("pay-button");
  var label = document.getElementById("pay-label");
  var payText = label.textContent;
  // The documents' tokens, once the processor has given them.
  var acceptance = null, personalAuth = null;
  // True while a payment runs: Pay stays disabled whatever the boxes say.
  var working = false;
  // The Nequi approval being waited for, if any: { cancel: function }.
  var nequiWait = null;
  var waitingTitle = document.getElementById("nequi-waiting-title").textContent;
  var NEQUI_POLL_MS = 1500;
  var NEQUI_WAIT_MS = 3 * 60 * 1000;

  function $(id) { return document.getElementById(id); }
  function digits(s) { return (s || "").replace(/\D/g, ""); }
  function later(ms) { return new Promise(function (resolve) { setTimeout(resolve, ms); }); }

  function setError(id, message) {
    var input = $(id), slot = $(id + "-error");
    if (slot) slot.textContent = message || "";
    if (input && input.setAttribute) input.setAttribute("aria-invalid", message ? "true" : "false");
  }
  function formError(message) { $("form-error").textContent = message || ""; }
  // A Nequi payment that did not go through: the form comes back with the reason in view,
  // and the phone field ready for another number.
  function nequiProblem(message) {
    formError(message);
    $("nequi-phone").focus({ preventScroll: true });
    $("form-error").scrollIntoView({ block: "center" });
  }

  function method() { return $("method-nequi").checked ? "nequi" : "card"; }
  function accepted() { return $("accept-terms").checked && $("accept-personal-data").checked; }

  // Pay is enabled only with both documents loaded and accepted, and no payment running.
  function refresh() {
    var ready = acceptance !== null && personalAuth !== null && accepted();
    button.disabled = working || !ready;
    $("accept-hint").hidden = accepted();
  }

  function busy(on) {
    working = on;
    label.textContent = on ? d.paying : payText;
    form.setAttribute("aria-busy", on ? "true" : "false");
    refresh();
  }

  function showMethod() {
    var nequi = method() === "nequi";
    $("card-fields").hidden = nequi;
    $("nequi-fields").hidden = !nequi;
    // The note is about card numbers, which a Nequi payment does not ask for.
    $("secure-note").hidden = nequi;
    formError("");
  }

  function luhn(number) {
    if (!/^\d{12,19}$/.test(number)) return false;
    var sum = 0;
    for (var i = 0; i < number.length; i++) {
      var n = +number[number.length - 1 - i];
      if (i % 2 === 1) { n *= 2; if (n > 9) n -= 9; }
      sum += n;
    }
    return sum % 10 === 0;
  }

  // "MM/YY" (or MM/YYYY) not before the current month.
  function expiry(raw) {
    var m = /^\s*(\d{1,2})\s*\/?\s*(\d{2}|\d{4})\s*$/.exec(raw || "");
    if (!m) return null;
    var month = +m[1], year = m[2].length === 2 ? 2000 + +m[2] : +m[2];
    if (month < 1 || month > 12) return null;
    var now = new Date();
    if (year < now.getFullYear() || (year === now.getFullYear() && month < now.getMonth() + 1)) return null;
    return { month: (month < 10 ? "0" : "") + month, year: String(year % 100).padStart(2, "0") };
  }

  // A Colombian mobile number as Nequi takes it: 10 digits starting with 3.
  function phone() {
    var v = digits($("nequi-phone").value);
    return /^3\d{9}$/.test(v) ? v : null;
  }

  // Formatting as the customer types: card digits in fours, MM/YY, and 300 123 4567.
  $("card-number").addEventListener("input", function (e) {
    var v = digits(e.target.value).slice(0, 19);
    e.target.value = v.replace(/(\d{4})(?=\d)/g, "$1 ");
  });
  $("card-expiry").addEventListener("input", function (e) {
    var v = digits(e.target.value).slice(0, 4);
    e.target.value = v.length > 2 ? v.slice(0, 2) + "/" + v.slice(2) : v;
  });
  $("nequi-phone").addEventListener("input", function (e) {
    var v = digits(e.target.value).slice(0, 10);
    e.target.value = v.replace(/^(\d{3})(\d{1,3})?(\d{1,4})?$/, function (_, a, b, c) {
      return [a, b, c].filter(Boolean).join(" ");
    });
  });
  $("method-card").addEventListener("change", showMethod);
  $("method-nequi").addEventListener("change", showMethod);
  $("accept-terms").addEventListener("change", refresh);
  $("accept-personal-data").addEventListener("change", refresh);

  function validate() {
    var ok = true, first = null;
    function check(id, valid, message) {
      setError(id, valid ? "" : message);
      if (!valid) { ok = false; first = first || id; }
    }
    if ($("customer-name")) {
      check("customer-name", $("customer-name").value.trim().length > 0, d.errName);
      check("customer-email", /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test($("customer-email").value.trim()), d.errEmail);
    }
    if (method() === "nequi") {
      check("nequi-phone", phone() !== null, d.errPhone);
    } else {
      check("card-number", luhn(digits($("card-number").value)), d.errCard);
      check("card-expiry", expiry($("card-expiry").value) !== null, d.errExpiry);
      check("card-cvc", /^\d{3,4}$/.test($("card-cvc").value.trim()), d.errCvc);
      check("card-holder", $("card-holder").value.trim().length >= 5, d.errHolder);
    }
    if (first) $(first).focus();
    return ok && accepted();
  }

  function json(response) {
    return response.text().then(function (text) {
      var body = null;
      try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
      return { status: response.status, body: body };
    });
  }

  function web(url) { return /^https?:\/\//.test(url || "") ? url : null; }

  // The processor's two documents: each is linked, and each token goes with the payment.
  fetch(d.processor + "/merchants/info", { headers: { "x-merchant-public-key": d.key } })
    .then(json)
    .then(function (r) {
      var data = r.body && r.body.data;
      var policy = data && data.presigned_acceptance;
      var personal = data && data.presigned_personal_data_auth;
      if (r.status !== 200 || !policy || !personal || !policy.acceptance_token || !personal.acceptance_token) {
        throw new Error("documents");
      }
      $("terms-link").href = web(policy.permalink) || "#";
      $("personal-data-link").href = web(personal.permalink) || "#";
      acceptance = policy.acceptance_token;
      personalAuth = personal.acceptance_token;
      refresh();
    })
    .catch(function () { formError(d.errTerms); });

  function tokenizeCard() {
    var exp = expiry($("card-expiry").value);
    return fetch(d.processor + "/tokens/cards", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Authorization": "Bearer " + d.key },
      body: JSON.stringify({
        number: digits($("card-number").value),
        cvc: $("card-cvc").value.trim(),
        exp_month: exp.month,
        exp_year: exp.year,
        card_holder: $("card-holder").value.trim()
      })
    }).then(json);
  }

  // A promotion code typed on the page (where the merchant offers the field): the server
  // checks it and answers the amounts it makes; the payment then sends it, and the server
  // counts it only with a payment that goes through.
  var promotionCode = null;
  var applyCode = $("apply-code");
  if (applyCode) {
    applyCode.addEventListener("click", function () {
      var code = $("promotion-code").value.trim();
      setError("promotion-code", "");
      if (!code) return;
      applyCode.disabled = true;
      fetch(encodeURIComponent(d.session) + "/promotion-code?lang=" + encodeURIComponent(d.lang), {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ code: code })
      }).then(json).then(function (r) {
        applyCode.disabled = false;
        if (r.status !== 200) { promotionCode = null; setError("promotion-code", d.errCode); return; }
        promotionCode = code;
        $("subtotal").textContent = r.body.subtotal;
        $("discount").textContent = "\u2212 " + r.body.discount;
        $("subtotal-line").hidden = false;
        $("discount-line").hidden = false;
        $("due").textContent = r.body.total;
        $("summary-amount").textContent = r.body.total;
        payText = d.pay + " " + r.body.total;
        if (!working) label.textContent = payText;
      }, function () {
        applyCode.disabled = false;
        setError("promotion-code", d.errNetwork);
      });
    });
  }

  // Completes the session with `payment` ({type, card_token | nequi_token}).
  function complete(payment, attempt) {
    var body = {
      type: payment.type,
      acceptance_token: acceptance,
      accept_personal_auth: personalAuth
    };
    if (payment.card_token) body.card_token = payment.card_token;
    if (payment.nequi_token) body.nequi_token = payment.nequi_token;
    if (promotionCode) body.promotion_code = promotionCode;
    if ($("customer-name")) {
      body.customer_name = $("customer-name").value.trim();
      body.customer_email = $("customer-email").value.trim();
    }
    return fetch(encodeURIComponent(d.session) + "/complete", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body)
    }).then(json).then(function (r) {
      // 202: the processor has not answered yet; asking again joins the same payment.
      if (r.status === 202 && attempt < 30) {
        return later(1000).then(function () { return complete(payment, attempt + 1); });
      }
      return r;
    });
  }

  function showConfirmation(out) {
    var s = out.summary || {};
    $("summary-plan").textContent = s.plan_name || "";
    $("summary-method").textContent = s.payment_method_type === "nequi"
      ? "Nequi ···" + (s.nequi_phone_last4 || "")
      : (s.card_brand || "") + " •••• " + (s.card_last4 || "");
    $("summary-email").textContent = s.customer_email || "";
    $("summary-subscription").textContent = out.subscription_id || "";
    form.hidden = true;
    $("nequi-waiting").hidden = true;
    $("confirmation").hidden = false;
    $("confirmation").focus();
  }

  function showForm() {
    $("nequi-waiting").hidden = true;
    form.hidden = false;
  }

  function clearCard() {
    $("card-number").value = "";
    $("card-cvc").value = "";
    $("card-number").focus();
  }

  // What the server answered to a complete: the confirmation, or why not and what to do.
  function finish(r, kind) {
    var error = r.body && r.body.error;
    if (r.status === 200) {
      if (r.body.redirect_url) { window.location.assign(r.body.redirect_url); return; }
      showConfirmation(r.body);
      return;
    }
    if (r.status === 409) {
      // Completed or expired meanwhile: the page itself says which.
      if (d.cancel && error && /expired/.test(error.message || "")) { window.location.assign(d.cancel); return; }
      window.location.reload();
      return;
    }
    showForm();
    busy(false);
    if (error && error.type === "processor_error") {
      if (kind === "nequi") nequiProblem(d.errNequiDeclined);
      else { formError(d.errDeclined); clearCard(); }
    }
    else if (error && error.type === "insufficient_balance") formError(d.errUnavailable);
    else if (error && error.param === "customer_email") setError("customer-email", d.errEmail);
    else if (error && error.param === "customer_name") setError("customer-name", d.errName);
    else formError((error && error.message) || d.errProcessor);
  }

  function payByCard() {
    return tokenizeCard().then(function (t) {
      if (t.status !== 201 || !t.body || !t.body.data) {
        setError("card-number", d.errProcessor);
        busy(false);
        return;
      }
      return complete({ type: "card", card_token: t.body.data.id }, 0)
        .then(function (r) { finish(r, "card"); });
    });
  }

  // Asks the processor about the Nequi token until the customer answers in the app: resolves
  // "APPROVED", "DECLINED", "TIMEOUT" (no answer within NEQUI_WAIT_MS) or "CANCELLED" (the
  // customer chose another number or method). A failed poll is no answer: polling goes on.
  function waitForNequi(id) {
    var deadline = Date.now() + NEQUI_WAIT_MS;
    var cancelled = false, timer = null;
    return new Promise(function (resolve) {
      nequiWait = {
        cancel: function () { cancelled = true; clearTimeout(timer); resolve("CANCELLED"); }
      };
      function poll() {
        if (cancelled) return;
        if (Date.now() >= deadline) { resolve("TIMEOUT"); return; }
        fetch(d.processor + "/tokens/nequi/" + encodeURIComponent(id), {
          headers: { "Authorization": "Bearer " + d.key }
        })
          .then(json)
          .then(function (r) {
            var status = r.status === 200 && r.body && r.body.data && r.body.data.status;
            if (cancelled) return;
            if (status === "APPROVED" || status === "DECLINED") { resolve(status); return; }
            timer = setTimeout(poll, NEQUI_POLL_MS);
          })
          .catch(function () { if (!cancelled) timer = setTimeout(poll, NEQUI_POLL_MS); });
      }
      timer = setTimeout(poll, NEQUI_POLL_MS);
    }).then(function (status) { nequiWait = null; return status; });
  }

  function showWaiting(number) {
    $("nequi-waiting-phone").textContent = number.replace(/^(\d{3})(\d{3})(\d{4})$/, "$1 $2 $3");
    $("nequi-waiting-title").textContent = waitingTitle;
    $("nequi-cancel").hidden = false;
    form.hidden = true;
    $("nequi-waiting").hidden = false;
    $("nequi-waiting").focus();
  }

  function payByNequi() {
    var number = phone();
    return fetch(d.processor + "/tokens/nequi", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Authorization": "Bearer " + d.key },
      body: JSON.stringify({ phone_number: number })
    }).then(json).then(function (t) {
      var token = t.status === 201 && t.body && t.body.data;
      if (!token || !token.id) {
        if (t.status === 422) setError("nequi-phone", d.errPhone);
        else formError(d.errProcessor);
        busy(false);
        return;
      }
      showWaiting(number);
      return waitForNequi(token.id).then(function (status) {
        if (status === "APPROVED") {
          // Approved in the app: the payment itself is what is waited for now.
          $("nequi-waiting-title").textContent = d.paying;
          $("nequi-cancel").hidden = true;
          return complete({ type: "nequi", nequi_token: token.id }, 0)
            .then(function (r) { finish(r, "nequi"); });
        }
        showForm();
        busy(false);
        if (status === "DECLINED") nequiProblem(d.errNequiDeclined);
        else if (status === "TIMEOUT") nequiProblem(d.errNequiTimeout);
        else $("nequi-phone").focus();
      });
    });
  }

  $("nequi-cancel").addEventListener("click", function () {
    if (nequiWait) nequiWait.cancel();
  });

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    if (button.disabled) return;
    formError("");
    if (!validate()) return;
    busy(true);
    var kind = method();
    (kind === "nequi" ? payByNequi() : payByCard())
      .catch(function () { showForm(); busy(false); formError(d.errNetwork); });
  });

  showMethod();
})();
