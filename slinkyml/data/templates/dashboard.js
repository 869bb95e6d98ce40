
function groups(b){var g=[];Array.prototype.forEach.call(b.rows,function(r){
if(r.classList.contains('detail')&&g.length)g[g.length-1].push(r);else g.push([r])});return g}
function key(c){if(c.dataset.v===undefined)return c.textContent;var v=parseFloat(c.dataset.v);return isNaN(v)?-Infinity:v}
document.querySelectorAll('table.sortable > thead th').forEach(function(th){th.addEventListener('click',function(){
var t=th.closest('table'),b=t.tBodies[0],i=Array.prototype.indexOf.call(th.parentNode.children,th),
d=th.dataset.dir==='a'?'d':'a';th.dataset.dir=d;var g=groups(b);g.sort(function(x,y){var u=key(x[0].cells[i]),
v=key(y[0].cells[i]),c=u<v?-1:u>v?1:0;return d==='a'?c:-c});g.forEach(function(rs){rs.forEach(function(r){
b.appendChild(r)})})})});
document.querySelectorAll('input.filter').forEach(function(f){f.addEventListener('input',function(){
var q=f.value.toLowerCase();groups(document.getElementById(f.dataset.table).tBodies[0]).forEach(function(rs){
var show=rs[0].textContent.toLowerCase().indexOf(q)>=0;rs.forEach(function(r){r.style.display=show?'':'none'})})})});
document.querySelectorAll('button.m').forEach(function(btn){btn.addEventListener('click',function(){
document.querySelectorAll('.chart[data-group="'+btn.dataset.group+'"]').forEach(function(c){
c.style.display=c.dataset.metric===btn.dataset.metric?'block':'none'});
document.querySelectorAll('button.m[data-group="'+btn.dataset.group+'"]').forEach(function(b){
b.classList.toggle('on',b===btn)})})});
