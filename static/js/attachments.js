/*
 * Files in the customer's chat: the Attach button, the files chosen for the next message, and
 * the files shown in a message (thumbnails for photos, a link for PDFs).
 *
 * chat.js asks this module (window.chatAttachments), when it is on the page:
 *   take()                      the files chosen for the message being sent (and clears the choice)
 *   keep(clientMsgId, files)    remember them for that message: every retry sends the same files
 *   has(clientMsgId)            whether that message carries files
 *   bytes(clientMsgId)          how many bytes its files have (how long their upload may take)
 *   form(clientMsgId, text)     the multipart body of its POST
 *   pending(el, files)          show "name (uploading)" in a bubble not yet sent
 *   show(el, attachments)       show a message's files as the server lists them
 *   stash(clientMsgId)          keep that message's files in the browser (IndexedDB) while the
 *                               customer signs in again; a promise of whether they were kept
 *   restore()                   put the files stashed for this ticket back among those chosen;
 *                               a promise of how many came back
 *   keepAcrossReload(id)        keep a message's files in IndexedDB until it is stored, so that
 *                               a reload sends them again with it (same client message ID)
 *   takeBack(id)                after a reload: a promise of that message's files ([] if none
 *                               were kept), remembered for its sends as keep() does
 *   forget(id)                  the message is stored: its files need not be kept any more
 *   chooseAgain(id, index)      the message was refused: its files are chosen again for the next
 *                               one, but for the one the refusal is about (its place among those
 *                               sent, the server's ``file_index``; none when it is about no file)
 *   namesOf(id)                 its files' names, as a message of files alone reads
 *   unreadable(id)              a promise of that message's files the browser can no longer read
 *                               (moved, changed or deleted on the computer since they were chosen)
 *   drop(id, files, el)         send that message without those files (its bubble says so)
 *   note(text)                  say something about the files beside the Attach button
 *   lostOverReload(id)          after a reload: the names of that message's files whose copy was
 *                               not found (IndexedDB cleared or off, or past its hour); "" if none
 *
 * The server decides what is accepted, from the bytes; the checks here (size, count) only say
 * so sooner. Names are set with textContent, never as HTML.
 */
(function () {
  "use strict";

  var input = document.getElementById("chat-files");
  var chosenList = document.getElementById("chat-files-chosen");
  var errorEl = document.getElementById("chat-files-error");
  var configEl = document.getElementById("chat-config");
  if (!input || !chosenList || !configEl) return;
  var config = JSON.parse(configEl.textContent);
  var chosen = [];
  var kept = {}; // client_msg_id -> [File]

  // Files of a message refused because the customer was signed out wait here (IndexedDB keeps
  // File objects; sessionStorage keeps only text) until the page comes back after sign-in, for an
  // hour at most; the page takes them out as it puts them back.
  var STASH_DB = "chat-files";
  var STASH_KEY = "ticket-" + config.ticketId;
  var STASH_MS = 60 * 60 * 1000;
  var keeping = {}; // client_msg_id -> the write of its copy kept across a reload, while under way
  // The names of the files of each message kept across a reload, in this tab's sessionStorage beside
  // its text: a copy of the files not found after the reload (IndexedDB cleared, off in a private
  // window, its hour over) is then said, never sent as if the message had had none.
  var NAMES_KEY = "chat-files-names-" + config.ticketId;
  var lostAtReload = {}; // client_msg_id -> the names of its files not found after the reload

  function keptNames(clientMsgId, files) {
    try {
      var all = JSON.parse(window.sessionStorage.getItem(NAMES_KEY) || "{}") || {};
      if (files === undefined) return all[clientMsgId] || [];
      if (files) all[clientMsgId] = files.map(function (file) { return file.name; });
      else delete all[clientMsgId];
      if (Object.keys(all).length) window.sessionStorage.setItem(NAMES_KEY, JSON.stringify(all));
      else window.sessionStorage.removeItem(NAMES_KEY);
    } catch (e) {
      /* storage full or off: the files' copy, if written, still goes */
    }
    return [];
  }

  function stashStore(mode, work, key) {
    key = key || STASH_KEY;
    return new Promise(function (resolve, reject) {
      if (!window.indexedDB) return reject(new Error("this browser keeps no files"));
      var open = window.indexedDB.open(STASH_DB, 1);
      open.onupgradeneeded = function () {
        open.result.createObjectStore("unsent");
      };
      open.onerror = function () {
        reject(open.error);
      };
      open.onsuccess = function () {
        var db = open.result;
        var tx = db.transaction("unsent", mode);
        var found = [];
        var get = tx.objectStore("unsent").get(key);
        get.onsuccess = function () {
          var entry = get.result;
          if (entry && Date.now() - entry.at < STASH_MS) found = entry.files;
          work(tx.objectStore("unsent"), found);
        };
        tx.oncomplete = function () {
          db.close();
          resolve(found);
        };
        tx.onerror = tx.onabort = function () {
          db.close();
          reject(tx.error);
        };
      };
    });
  }

  // Kept files past their hour are taken out whenever a chat page opens (one a tab never came
  // back for would otherwise stay in the browser).
  function dropStale() {
    if (!window.indexedDB) return;
    var open = window.indexedDB.open(STASH_DB, 1);
    open.onupgradeneeded = function () {
      open.result.createObjectStore("unsent");
    };
    open.onsuccess = function () {
      var db = open.result;
      var tx = db.transaction("unsent", "readwrite");
      tx.objectStore("unsent").openCursor().onsuccess = function (event) {
        var cursor = event.target.result;
        if (!cursor) return;
        if (!cursor.value || !(Date.now() - cursor.value.at < STASH_MS)) cursor.delete();
        cursor.continue();
      };
      tx.oncomplete = tx.onerror = tx.onabort = function () {
        db.close();
      };
    };
  }
  dropStale();

  function sizeWords(size) {
    if (size < 1024) return size + " bytes";
    if (size < 1024 * 1024) return Math.round(size / 1024) + " KB";
    return (size / (1024 * 1024)).toFixed(1).replace(/\.0$/, "") + " MB";
  }

  function say(text) {
    errorEl.textContent = text;
    errorEl.hidden = !text;
  }

  // A file the browser can no longer read (the customer moved, changed or deleted it after choosing
  // it) makes every upload of its message fail as a network failure would: one byte read tells.
  function readable(file) {
    return new Promise(function (resolve) {
      var reader = new FileReader();
      reader.onload = function () {
        resolve(true);
      };
      reader.onerror = reader.onabort = function () {
        resolve(false);
      };
      try {
        reader.readAsArrayBuffer(file.slice(0, 1));
      } catch (e) {
        resolve(false);
      }
    });
  }

  function renderChosen() {
    chosenList.textContent = "";
    chosen.forEach(function (file, index) {
      var li = document.createElement("li");
      // The name in a box of its own: one too long for the screen is cut short there (its whole
      // text in the title), never pushing its remove button out of reach.
      var name = document.createElement("span");
      name.className = "chosen-name";
      name.textContent = file.name + " (" + sizeWords(file.size) + ")";
      name.title = name.textContent;
      li.appendChild(name);
      var remove = document.createElement("button");
      remove.type = "button";
      remove.textContent = "×";
      remove.setAttribute("aria-label", "Remove " + file.name);
      remove.addEventListener("click", function () {
        chosen.splice(index, 1);
        renderChosen();
        input.focus();
      });
      li.appendChild(remove);
      chosenList.appendChild(li);
    });
  }

  input.addEventListener("change", function () {
    var problems = [];
    Array.prototype.forEach.call(input.files, function (file) {
      if (file.size > config.attachMaxBytes) {
        problems.push(file.name + " is " + sizeWords(file.size) + "; a file can be at most " + sizeWords(config.attachMaxBytes) + ".");
      } else if (chosen.length >= config.attachMaxFiles) {
        problems.push("You can attach at most " + config.attachMaxFiles + " files to one message.");
      } else {
        chosen.push(file);
      }
    });
    input.value = ""; // the same file can be chosen again after it is removed
    say(problems.filter(function (p, i) { return problems.indexOf(p) === i; }).join(" "));
    renderChosen();
  });

  function fileList(el) {
    var list = el.querySelector("ul.attachments");
    if (list) list.remove();
    list = document.createElement("ul");
    list.className = "attachments";
    el.appendChild(list);
    return list;
  }

  window.chatAttachments = {
    take: function () {
      var files = chosen;
      chosen = [];
      renderChosen();
      say("");
      return files;
    },
    keep: function (clientMsgId, files) {
      if (files.length) kept[clientMsgId] = files;
    },
    has: function (clientMsgId) {
      return Boolean(kept[clientMsgId]);
    },
    bytes: function (clientMsgId) {
      return (kept[clientMsgId] || []).reduce(function (sum, file) { return sum + file.size; }, 0);
    },
    form: function (clientMsgId, text) {
      var form = new FormData();
      form.append("client_msg_id", clientMsgId);
      form.append("body", text);
      kept[clientMsgId].forEach(function (file) {
        form.append("files", file, file.name);
      });
      return form;
    },
    pending: function (el, files) {
      if (!files.length) return;
      var list = fileList(el);
      files.forEach(function (file) {
        var li = document.createElement("li");
        li.className = "attachment uploading";
        li.textContent = file.name + " ";
        var progress = document.createElement("span");
        progress.className = "upload-state"; // hidden by the stylesheet once the message failed
        progress.textContent = "(uploading…)";
        li.appendChild(progress);
        li.chatFile = file; // drop() finds it by the file, never by its name (phones repeat names)
        list.appendChild(li);
      });
    },
    stash: function (clientMsgId) {
      var files = kept[clientMsgId];
      if (!files) return Promise.resolve(false);
      return stashStore("readwrite", function (store, before) {
        store.put({ at: Date.now(), files: before.concat(files) }, STASH_KEY);
      }).then(
        function () {
          return true;
        },
        function () {
          return false;
        }
      );
    },
    restore: function () {
      return stashStore("readwrite", function (store) {
        store.delete(STASH_KEY);
      }).then(
        function (found) {
          var room = Math.max(0, config.attachMaxFiles - chosen.length);
          chosen = chosen.concat(found.slice(0, room));
          renderChosen();
          if (found.length > room) {
            say("You can attach at most " + config.attachMaxFiles + " files to one message: " +
              found.slice(room).map(function (file) { return file.name; }).join(", ") + " did not fit; choose again.");
          }
          return Math.min(found.length, room);
        },
        function () {
          return 0;
        }
      );
    },
    keepAcrossReload: function (clientMsgId) {
      var files = kept[clientMsgId];
      if (!files) return Promise.resolve(false);
      keptNames(clientMsgId, files);
      keeping[clientMsgId] = stashStore("readwrite", function (store) {
        store.put({ at: Date.now(), files: files }, "message-" + clientMsgId);
      }, "message-" + clientMsgId).then(
        function () { return true; },
        function () { return false; }
      );
      return keeping[clientMsgId];
    },
    takeBack: function (clientMsgId) {
      return stashStore("readonly", function () {}, "message-" + clientMsgId).then(
        function (found) {
          if (found.length) kept[clientMsgId] = found;
          else lostAtReload[clientMsgId] = keptNames(clientMsgId).join(", ");
          return found;
        },
        function () {
          lostAtReload[clientMsgId] = keptNames(clientMsgId).join(", ");
          return [];
        }
      );
    },
    forget: function (clientMsgId) {
      keptNames(clientMsgId, null);
      delete lostAtReload[clientMsgId];
      if (!kept[clientMsgId]) return;
      // After the copy kept for a reload is written, never before: a fast answer must not leave it.
      var written = keeping[clientMsgId] || Promise.resolve();
      delete keeping[clientMsgId];
      written.then(function () {
        return stashStore("readwrite", function (store) {
          store.delete("message-" + clientMsgId);
        }, "message-" + clientMsgId);
      }).catch(function () {});
    },
    chooseAgain: function (clientMsgId, refusedIndex) {
      var files = kept[clientMsgId] || [];
      var room = Math.max(0, config.attachMaxFiles - chosen.length);
      // The refused file is known by its place among those sent, never by its name: a phone names
      // every photo "image.jpg", and the server tells a name cleaned (a leading dot gone, accents
      // composed), which is not always the one the device gave.
      chosen = chosen.concat(
        files
          .filter(function (file, index) {
            return index !== refusedIndex;
          })
          .slice(0, room)
      );
      renderChosen();
    },
    unreadable: function (clientMsgId) {
      return Promise.all(
        (kept[clientMsgId] || []).map(function (file) {
          return readable(file).then(function (ok) {
            return ok ? null : file;
          });
        })
      ).then(function (files) {
        return files.filter(Boolean);
      });
    },
    drop: function (clientMsgId, files, el) {
      var left = (kept[clientMsgId] || []).filter(function (file) {
        return files.indexOf(file) < 0;
      });
      if (el) {
        Array.prototype.forEach.call(el.querySelectorAll("li.attachment.uploading"), function (li) {
          if (files.indexOf(li.chatFile) < 0) return;
          li.classList.remove("uploading");
          li.querySelector(".upload-state").textContent = "(could not be read: not sent)";
        });
      }
      if (left.length) {
        kept[clientMsgId] = left;
        window.chatAttachments.keepAcrossReload(clientMsgId); // a reload sends the others, not these
      } else {
        window.chatAttachments.forget(clientMsgId);
        delete kept[clientMsgId];
      }
    },
    lostOverReload: function (clientMsgId) {
      return lostAtReload[clientMsgId] || "";
    },
    note: function (text) {
      say(text);
    },
    namesOf: function (clientMsgId) {
      return (kept[clientMsgId] || [])
        .map(function (file) {
          return file.name;
        })
        .join(", ");
    },
    show: function (el, attachments) {
      if (!attachments || !attachments.length) return;
      var list = fileList(el);
      attachments.forEach(function (file) {
        var li = document.createElement("li");
        li.className = "attachment" + (file.image ? " is-image" : "");
        li.setAttribute("data-attachment-id", String(file.id));
        var link = document.createElement("a");
        link.href = file.url;
        if (file.image) {
          link.target = "_blank";
          link.rel = "noopener";
          var img = document.createElement("img");
          img.src = file.url;
          img.alt = file.name;
          link.appendChild(img);
          li.appendChild(link);
        } else {
          link.className = "file-link";
          link.setAttribute("download", "");
          link.textContent = "📄 " + file.name;
          li.appendChild(link);
          var size = document.createElement("span");
          size.className = "file-size";
          size.textContent = " PDF, " + file.size_text;
          li.appendChild(size);
        }
        list.appendChild(li);
      });
    },
  };
})();
